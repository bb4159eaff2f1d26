"""--action-format tool_call|json: the call parser (cases, fuzzing, round trips), the tools in the
prompt (the chat template's tools= or the text fallback) and the warm-up's target text."""

from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

import envs
from agents.agent import LLMAgent, View
from agents.generation import SamplingConfig
from agents.model import load_tokenizer
from agents.parser import (
    BAD_ARGUMENTS,
    EMPTY,
    MALFORMED_JSON,
    MULTIPLE,
    NO_ACTION_TAG,
    NOT_ADMISSIBLE,
    OK,
    UNKNOWN_TOOL,
)
from agents.prompt import PromptBuilder
from agents.templates import renders_tools
from agents.tools import ActionFormat, act_tool, check_tools
from envs.keydoor import DIRS, TOOLS

QWEN25 = Path(__file__).parent.parent / "agents" / "data" / "qwen2.5_chat_template.jinja"
ADM = ["go north", "take red key"]
DERIVED = ActionFormat("tool_call")
KEYDOOR = ActionFormat.for_env("tool_call", {"tools": TOOLS})


def call(name, args) -> str:
    import json

    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.mark.parametrize(
    "fmt, text, expected",
    [
        (DERIVED, call("act", {"command": "go north"}), ("go north", OK)),
        (DERIVED, "<think>hm {</think>\n<tool_call>\n" '{"name": "act", "arguments": {"command": "Go  NORTH"}}'
         "\n</tool_call>", ("go north", OK)),  # fmt: skip
        (DERIVED, '<tool_call>{"name": "act", "arguments": "{\\"command\\": \\"go north\\"}"}</tool_call>', ("go north", OK)),
        (DERIVED, call("act", {"command": "go south"}), ("go south", NOT_ADMISSIBLE)),
        (DERIVED, call("act", {"command": "go north"}) + call("act", {"command": "go south"}), ("go north", MULTIPLE)),
        (DERIVED, call("act", {"command": "   "}), ("", EMPTY)),
        (DERIVED, "<tool_call> </tool_call>", ("", EMPTY)),
        (DERIVED, "<tool_call>{'name': 'act'}</tool_call>", ("", MALFORMED_JSON)),
        (DERIVED, '<tool_call>["act"]</tool_call>', ("", MALFORMED_JSON)),
        (DERIVED, '<tool_call>{"name": "act", "arguments": {"command": "go', ("", NO_ACTION_TAG)),  # cut off
        (DERIVED, "go north", ("", NO_ACTION_TAG)),
        (DERIVED, "<action>go north</action>", ("", NO_ACTION_TAG)),
        (DERIVED, call("go", {"direction": "north"}), ("", UNKNOWN_TOOL)),
        (DERIVED, call("act", {}), ("", BAD_ARGUMENTS)),
        (DERIVED, call("act", {"command": "go north", "speed": 2}), ("", BAD_ARGUMENTS)),
        (DERIVED, call("act", {"command": ["go north"]}), ("", BAD_ARGUMENTS)),
        (DERIVED, '<tool_call>{"name": "act", "arguments": 3}</tool_call>', ("", BAD_ARGUMENTS)),
        (KEYDOOR, call("go", {"direction": "north"}), ("go north", OK)),
        (KEYDOOR, call("take", {"item": "Red Key"}), ("take red key", OK)),
        (KEYDOOR, call("go", {"direction": "up"}), ("", BAD_ARGUMENTS)),  # outside the env tool's enum
        (KEYDOOR, call("unlock", {"direction": "east"}), ("unlock east", NOT_ADMISSIBLE)),
        (KEYDOOR, call("act", {"command": "go north"}), ("", UNKNOWN_TOOL)),
    ],
)
def test_tool_call_cases(fmt, text, expected):
    assert fmt.parse(text, ADM) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"name": "act", "arguments": {"command": "take red key"}}', ("take red key", OK)),
        ('<think>{"name": "act", "arguments": {"command": "go south"}}</think> {"name": "act", '
         '"arguments": {"command": "go north"}}', ("go north", OK)),  # fmt: skip
        ('Sure: <tool_call>{"name": "act", "arguments": {"command": "go north"}}</tool_call>', ("go north", OK)),
        ('{"name": "act", "arguments": {"command": "go north"}} {"name": "act", "arguments": {}}', ("go north", MULTIPLE)),
        ('{"name": "act", "arguments": {"command": "go', ("", MALFORMED_JSON)),
        ('{"command": "go north"}', ("", MALFORMED_JSON)),
        ("go north", ("", NO_ACTION_TAG)),
        ('{"name": "walk", "arguments": {}}', ("", UNKNOWN_TOOL)),
    ],
)
def test_json_cases(text, expected):
    assert ActionFormat("json").parse(text, ADM) == expected


COMMAND = st.text(min_size=1, max_size=60).filter(lambda c: " ".join(c.lower().split()))


@given(st.lists(COMMAND, min_size=1, max_size=6, unique_by=lambda c: " ".join(c.lower().split())),
       st.integers(0, 5), st.sampled_from(["tool_call", "json"]))  # fmt: skip
def test_round_trip_for_any_admissible_command(admissible, i, name):
    command = admissible[i % len(admissible)]
    fmt = ActionFormat(name)
    assert fmt.parse(fmt.reply(command), admissible) == (command, OK)


@given(st.sampled_from(["go", "unlock", "take"]), st.sampled_from(list(DIRS)),
       st.from_regex(r"[a-z]+( [a-z]+)?", fullmatch=True), st.sampled_from(["tool_call", "json"]))  # fmt: skip
def test_round_trip_for_keydoor_tools(verb, direction, item, name):
    command = f"{verb} {item if verb == 'take' else direction}"
    fmt = ActionFormat.for_env(name, {"tools": TOOLS})
    assert fmt.parse(fmt.reply(command), [command, "go nowhere"]) == (command, OK)


def test_every_keydoor_expert_and_admissible_command_round_trips():
    fmt = ActionFormat.for_env("tool_call", envs.env_metadata("KeyDoor-v0"))
    env = gym.make("KeyDoor-v0")
    for seed in range(5):
        _, info = env.reset(seed=seed)
        for _ in range(30):
            adm = info["admissible_commands"]
            for c in adm:
                assert fmt.parse(fmt.reply(c), adm) == (c, OK)
            _, _, term, trunc, info = env.step(info["expert_action"])
            if term or trunc:
                break


def test_env_tool_command_templates():
    tools = [{"type": "function", "function": {"name": "put", "parameters": {"type": "object", "properties": {
        "item": {"type": "string"}, "place": {"type": "string"}}}}}]  # fmt: skip
    fmt = ActionFormat.for_env("json", {"tools": tools, "tool_commands": {"put": "put {item} on {place}"}})
    assert fmt.call("put red key on table") == {"name": "put", "arguments": {"item": "red key", "place": "table"}}
    assert fmt.parse('{"name": "put", "arguments": {"item": "cup", "place": "shelf"}}', None) == ("put cup on shelf", OK)
    with pytest.raises(ValueError, match="fits none"):
        fmt.reply("look")


@pytest.mark.parametrize("tools", [[], [{"type": "function"}], [act_tool(None), act_tool(None)], "act"])
def test_bad_tool_declarations_are_one_line_errors(tools):
    with pytest.raises(ValueError, match="metadata"):
        check_tools(tools)


def test_tag_format_is_unchanged():
    assert ActionFormat().reply("go north") == "<action>go north</action>"
    system = PromptBuilder(memory=1).messages("Find it.", [], "now", ADM)[0]["content"]
    assert system == ("Task: Find it.\nReply with one command from the list as <action>command</action>; "
                      "you may think first in <think></think>.")  # fmt: skip


def test_config_checks_the_action_format():
    SamplingConfig(action_format="json").check()
    with pytest.raises(ValueError, match="action_format"):
        SamplingConfig(action_format="xml").check()


class _NoBackend:
    def generate(self, prompts, sampling):
        raise AssertionError("not called")


def test_tiny_template_gets_the_tools_as_text(tiny_path):
    tok = load_tokenizer(tiny_path)
    assert not renders_tools(tok)
    agent = LLMAgent(tok, _NoBackend(), PromptBuilder(memory=1, action_format=KEYDOOR), None)
    assert not agent.native_tools
    text = tok.decode(agent.prompt_ids(View("Find it.", (), "You are in the hall.", tuple(ADM))))
    assert '"name": "unlock"' in text and "<tool_call>" in text and "Example reply" in text
    assert agent.reply("take red key") == '<tool_call>\n{"name": "take", "arguments": {"item": "red key"}}\n</tool_call>'


def test_qwen_template_gets_the_tools_through_tools(tiny_path):
    tok = load_tokenizer(tiny_path)
    tok.chat_template = QWEN25.read_text()
    assert renders_tools(tok)
    agent = LLMAgent(tok, _NoBackend(), PromptBuilder(memory=1, action_format=DERIVED), None, max_prompt_tokens=4096)
    assert agent.native_tools
    text = tok.decode(agent.prompt_ids(View("Find it.", (), "You are in the hall.", tuple(ADM))))
    assert "<tools>" in text and '"enum": ["go north", "take red key"]' in text and "Tools (JSON schemas)" not in text
    json_agent = LLMAgent(tok, _NoBackend(), PromptBuilder(memory=1, action_format=ActionFormat("json")), None)
    assert not json_agent.native_tools  # the template's tool prompt would ask for <tool_call> tags


def test_warm_up_targets_are_calls(tiny_path):
    import random

    from agents.generation import Sampling
    from algos.sft import expert_demos

    tok = load_tokenizer(tiny_path)
    fmt = ActionFormat.for_env("tool_call", envs.env_metadata("KeyDoor-v0"))
    agent = LLMAgent(tok, _NoBackend(), PromptBuilder(memory=1, action_format=fmt), Sampling(max_new_tokens=64))
    demos = expert_demos(agent, "KeyDoor-v0", [0], 0.0, random.Random(0))
    _, info = gym.make("KeyDoor-v0").reset(seed=0)
    assert demos[0].response_ids == tok(fmt.reply(info["expert_action"]), add_special_tokens=False)["input_ids"] + [
        tok.eos_token_id
    ]
    assert tok.decode(demos[0].response_ids, skip_special_tokens=True).startswith('<tool_call>\n{"name": ')
