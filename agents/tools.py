"""Action formats: how the model is asked to reply, and what a correct reply looks like.

`--action-format tag` (the default) asks for `<action>command</action>`. `tool_call` and `json`
offer the env's tools as JSON schemas (OpenAI/Qwen function format) and ask for one call:

    tool_call  <tool_call>\n{"name": "go", "arguments": {"direction": "north"}}\n</tool_call>
    json       {"name": "go", "arguments": {"direction": "north"}}

The tools: an env's `metadata["tools"]` (a list of {"type": "function", "function": {"name",
"description", "parameters"}}), else one `act` tool derived from each step's admissible commands
(`{"command": {"type": "string", "enum": [...]}}`, a free string when there is no list). A call
becomes the env's command through its command template (agents/parser.py `command_template`):
the tool name followed by its arguments in `properties` order, or the env's own
`metadata["tool_commands"][name]`, e.g. "take {item} from {place}".

How the tools reach the prompt: with `tool_call`, through the chat template's `tools=` when the
template renders them (agents/templates.py `renders_tools`: Qwen2.5's does), else as text in the
system message (the tool list as JSON lines plus the exact call format: the tiny model's ChatML).
`json` always uses the text: a template's own tool prompt asks for `<tool_call>` tags.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.parser import ACT, TEMPLATE_FIELD, command_template, parse_action

ACTION_FORMATS = ("tag", "tool_call", "json")
CALL_SHAPE = '{"name": <tool name>, "arguments": {<argument>: <value>, ...}}'


def act_tool(admissible: Sequence[str] | None) -> dict:
    """The one tool derived from the admissible commands (any string when there is no list)."""
    command: dict = {"type": "string", "description": "the command to send"}
    if admissible is not None:
        command["enum"] = list(admissible)
    return {
        "type": "function",
        "function": {
            "name": ACT,
            "description": "Send one command to the environment.",
            "parameters": {"type": "object", "properties": {"command": command}, "required": ["command"]},
        },
    }


def check_tools(tools: object, commands: object = None) -> None:
    """ValueError (one line) unless `tools` is a list of function schemas with unique names, and
    `commands` maps some of those names to template strings."""
    if not isinstance(tools, (list, tuple)) or not tools:
        raise ValueError('metadata["tools"] must be a non-empty list of {"type": "function", "function": {...}}')
    names = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f'metadata["tools"]: {t!r} is not {{"type": "function", "function": {{"name": ...}}}}')
        params = fn.get("parameters") or {}
        if not isinstance(params, dict) or not isinstance(params.get("properties") or {}, dict):
            raise ValueError(f'metadata["tools"]: {fn["name"]}: parameters must be an object schema with properties')
        names.append(fn["name"])
    if len(set(names)) != len(names):
        raise ValueError(f'metadata["tools"]: tool names must be unique (got {names})')
    if commands is not None and (not isinstance(commands, dict) or set(commands) - set(names)):
        raise ValueError('metadata["tool_commands"] must map tool names to command templates')


@dataclass(frozen=True)
class ActionFormat:
    """One run's reply format: its name (ACTION_FORMATS), the env's declared tools (None: the
    derived `act` tool) and their command templates."""

    name: str = "tag"
    tools: tuple[dict, ...] | None = None
    commands: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_env(cls, name: str, metadata: dict) -> ActionFormat:
        """The format `name` with an env's `metadata["tools"]` / `["tool_commands"]` (ValueError if bad)."""
        tools, commands = metadata.get("tools"), metadata.get("tool_commands")
        if name == "tag" or tools is None:
            return cls(name)
        check_tools(tools, commands)
        return cls(name, tuple(tools), dict(commands or {}))

    def tools_for(self, admissible: Sequence[str] | None) -> list[dict]:
        return list(self.tools) if self.tools is not None else [act_tool(admissible)]

    def parse(self, text: object, admissible: Sequence[str] | None) -> tuple[str, str]:
        tools = list(self.tools) if self.tools is not None else None
        return parse_action(text, admissible, action_format=self.name, tools=tools, commands=self.commands)

    def call(self, command: str) -> dict:
        """The call that parses back to `command` (ValueError when no declared tool can make it)."""
        if self.tools is None:
            return {"name": ACT, "arguments": {"command": command}}
        for tool in self.tools:
            args = _match(tool, command_template(tool, self.commands), command)
            if args is not None:
                return {"name": tool["function"]["name"], "arguments": args}
        raise ValueError(f"command {command!r} fits none of the env's tools")

    def reply(self, command: str) -> str:
        """A correct reply sending `command`: the SFT warm-up's target text."""
        if self.name == "tag":
            return f"<action>{command}</action>"
        call = json.dumps(self.call(command), ensure_ascii=False)
        return f"<tool_call>\n{call}\n</tool_call>" if self.name == "tool_call" else call

    def how(self, what: str) -> str:
        """How the system message asks for a reply that sends `what` ("command", "answer")."""
        if self.name == "tag":
            return f"<action>{what}</action>"
        shape = f"<tool_call>{CALL_SHAPE}</tool_call>" if self.name == "tool_call" else f"one JSON object {CALL_SHAPE}"
        return f"one call of a tool below that sends the {what}, written {shape}"

    def tool_text(self, admissible: Sequence[str] | None) -> str:
        """The tools as text, for templates that do not render `tools=` (and the json format)."""
        lines = [json.dumps(t, ensure_ascii=False) for t in self.tools_for(admissible)]
        example = self.reply(admissible[0]) if admissible and self._fits(admissible[0]) else None
        tail = [f"Example reply: {example}"] if example else []
        return "\n".join(["Tools (JSON schemas):", *lines, *tail])

    def _fits(self, command: str) -> bool:
        try:
            self.call(command)
            return True
        except ValueError:
            return False


def _match(tool: dict, template: str, command: str) -> dict | None:
    """The arguments that fill `template` to give `command`, or None (enum and type respected)."""
    names = TEMPLATE_FIELD.findall(template)
    literals = TEMPLATE_FIELD.split(template)[::2]
    pattern = "(.*?)".join(re.escape(part) for part in literals)
    m = re.fullmatch(pattern, command, re.DOTALL)
    if m is None:
        return None
    props = (tool["function"].get("parameters") or {}).get("properties") or {}
    args: dict = {}
    for name, value in zip(names, m.groups()):
        schema = props.get(name, {})
        if schema.get("enum") is not None and value not in [str(e) for e in schema["enum"]]:
            return None
        if schema.get("type") in ("integer", "number"):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        args[name] = value
    return args
