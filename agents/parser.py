"""Action parsing: model text -> (command, status). Never raises, whatever the bytes.

Three reply formats (`--action-format`, agents/tools.py builds the prompt side of each):

    tag        optional `<think>...</think>`, then `<action>command</action>` (the default)
    tool_call  Qwen-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
    json       a bare JSON object `{"name": ..., "arguments": {...}}` (outside `<think>` blocks)

A tool call maps to the env's command string: for the derived `act` tool (an env that
declares no tools) its `command` argument; for an env's own tools (`metadata["tools"]`) the
tool's command template filled with the arguments (`command_template`). The status taxonomy
lets the trainer count and penalise each failure mode separately:

    ok              one action/call, non-empty, admissible (or no admissible list given)
    no_action_tag   no complete <action>...</action> or <tool_call>...</tool_call>, no JSON object
                    (includes output cut at max tokens)
    empty           the tag holds only whitespace
    multiple_actions more than one action/call; the first is used, still counted invalid
    not_admissible  the command is not in the env's admissible list
    malformed_json  the call is not valid JSON, or not an object with a string "name"
    unknown_tool    the call names no tool on offer
    bad_arguments   arguments missing, unexpected, of the wrong type or outside an env tool's enum

Matching against admissible commands ignores case and repeated whitespace, and returns the
env's own spelling of the command.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

OK = "ok"
NO_ACTION_TAG = "no_action_tag"
EMPTY = "empty"
MULTIPLE = "multiple_actions"
NOT_ADMISSIBLE = "not_admissible"
MALFORMED_JSON = "malformed_json"
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"
STATUSES = (OK, NO_ACTION_TAG, EMPTY, MULTIPLE, NOT_ADMISSIBLE, MALFORMED_JSON, UNKNOWN_TOOL, BAD_ARGUMENTS)

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_OPEN, _CLOSE = re.compile(r"<tool_call>", re.IGNORECASE), re.compile(r"\s*</tool_call>", re.IGNORECASE)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
TEMPLATE_FIELD = re.compile(r"\{([^{}]*)\}")  # a command template's `{argument}` placeholder
MAX_ACTION_CHARS = 200
MAX_JSON_STARTS = 64  # json format: "{" positions tried; bounds the work on brace-heavy text
ACT = "act"  # the tool derived from the admissible commands when an env declares none
_JSON = json.JSONDecoder()


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def parse_action(
    text: object,
    admissible: Sequence[str] | None = None,
    *,
    action_format: str = "tag",
    tools: list[dict] | None = None,
    commands: dict[str, str] | None = None,
) -> tuple[str, str]:
    """Returns (command, status). The command is "" when there is nothing to send. `tools`: the
    env's declared tools (None: the derived `act` tool); `commands`: their command templates."""
    if not isinstance(text, str):
        text = str(text)
    text = text.replace("\x00", "")
    if action_format != "tag":
        calls = _tool_calls(text) if action_format == "tool_call" else _json_calls(text)
        if isinstance(calls, str):
            return "", calls
        command, status = _call_command(calls[0], admissible, tools, commands or {})
        return command, (MULTIPLE if status == OK and len(calls) > 1 else status)
    found = _ACTION.findall(text)
    if not found:
        return "", NO_ACTION_TAG
    command = normalize(found[0])[:MAX_ACTION_CHARS]
    if not command:
        return "", EMPTY
    return _admit(command, admissible, len(found))


def _admit(command: str, admissible: Sequence[str] | None, count: int = 1) -> tuple[str, str]:
    if admissible is not None:
        by_norm = {normalize(c): c for c in admissible}
        if command not in by_norm:
            return command, NOT_ADMISSIBLE
        command = by_norm[command]
    return command, (MULTIPLE if count > 1 else OK)


def _tool_calls(text: str) -> list | str:
    """The JSON of each complete <tool_call> block, or the status of the first block when it is
    empty or not JSON; NO_ACTION_TAG when no block is complete (cut off at max tokens)."""
    calls: list = []
    first_bad = None
    for opening in _OPEN.finditer(text):
        start = opening.end()
        close = _CLOSE.search(text, start)
        try:
            body_start = len(text) - len(text[start:].lstrip())
            obj, end = _JSON.raw_decode(text, body_start)
            after = _CLOSE.match(text, end)
        except (ValueError, RecursionError):
            after = None
        if after is not None:
            calls.append(obj)
        elif close is not None and not calls and first_bad is None:
            first_bad = EMPTY if not text[start : close.start()].strip() else MALFORMED_JSON
    if first_bad is not None and not calls:
        return first_bad
    return calls or NO_ACTION_TAG


def _json_calls(text: str) -> list | str:
    """Every top-level JSON object outside <think> blocks; MALFORMED_JSON when there are braces but
    no object decodes, NO_ACTION_TAG when there is no "{" at all."""
    text = _THINK.sub(" ", text)
    calls: list = []
    pos, tries = text.find("{"), 0
    if pos < 0:
        return NO_ACTION_TAG
    while pos >= 0 and tries < MAX_JSON_STARTS:
        tries += 1
        try:
            obj, end = _JSON.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        calls.append(obj)
        pos = text.find("{", end)
    return calls or MALFORMED_JSON


def command_template(tool: dict, commands: dict[str, str]) -> str:
    """How a call of `tool` becomes a command: `commands[name]` (an env's
    `metadata["tool_commands"]`), else the name followed by each argument in `properties` order
    ("go {direction}"). The derived `act` tool is "{command}"."""
    fn = tool.get("function", {})
    name = str(fn.get("name", ""))
    if name in commands:
        return commands[name]
    props = (fn.get("parameters") or {}).get("properties") or {}
    return " ".join([name, *(f"{{{p}}}" for p in props)])


def _call_command(call: object, admissible, tools, commands) -> tuple[str, str]:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return "", MALFORMED_JSON
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):  # OpenAI's wire format sends arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return "", BAD_ARGUMENTS
    if not isinstance(args, dict):
        return "", BAD_ARGUMENTS
    derived = tools is None
    by_name = {t["function"]["name"]: t for t in tools} if tools is not None else {}
    if derived and call["name"].strip() == ACT:
        template, props, required = "{command}", {"command": {"type": "string"}}, ["command"]
    elif not derived and call["name"].strip() in by_name:
        tool = by_name[call["name"].strip()]
        params = tool["function"].get("parameters") or {}
        props = params.get("properties") or {}
        required = params.get("required", list(props))
        template = command_template(tool, commands)
    else:
        return "", UNKNOWN_TOOL
    if set(args) - set(props) or set(required) - set(args):
        return "", BAD_ARGUMENTS
    values = {}
    for key, value in args.items():
        if not _fits(value, props[key], check_enum=not derived):  # act's enum is the admissible list
            return "", BAD_ARGUMENTS
        values[key] = value if isinstance(value, str) else json.dumps(value)
    command = normalize(TEMPLATE_FIELD.sub(lambda m: values.get(m.group(1), ""), template))[:MAX_ACTION_CHARS]
    if not command:
        return "", EMPTY
    return _admit(command, admissible)


def _fits(value: object, schema: dict, check_enum: bool) -> bool:
    kind = schema.get("type", "string")
    if kind == "boolean" or isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return kind == "boolean" and isinstance(value, bool)
    if kind == "string" and not isinstance(value, str):
        return False
    if kind in ("integer", "number") and (isinstance(value, str) or (kind == "integer" and isinstance(value, float))):
        return False
    enum = schema.get("enum")
    return not (check_enum and enum is not None and normalize(str(value)) not in {normalize(str(e)) for e in enum})
