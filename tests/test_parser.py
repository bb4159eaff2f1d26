import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.parser import EMPTY, MULTIPLE, NO_ACTION_TAG, NOT_ADMISSIBLE, OK, STATUSES, parse_action
from agents.tools import ActionFormat
from envs.keydoor import TOOLS

sys.path.insert(0, str(Path(__file__).parent))
from adversarial import TEXT, adversarial_strings  # noqa: E402

ADM = ["go north", "take red key"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<action>go north</action>", ("go north", OK)),
        ("<think>the key is here</think><action>take red key</action>", ("take red key", OK)),
        ("<action>  Go   NORTH </action>", ("go north", OK)),
        ("<ACTION>go north</ACTION>", ("go north", OK)),
        ("go north", ("", NO_ACTION_TAG)),
        ("<action>go north", ("", NO_ACTION_TAG)),
        ("<action>   </action>", ("", EMPTY)),
        ("<action>go south</action>", ("go south", NOT_ADMISSIBLE)),
        ("<action>go north</action><action>go south</action>", ("go north", MULTIPLE)),
        ("", ("", NO_ACTION_TAG)),
    ],
)
def test_parse_cases(text, expected):
    assert parse_action(text, ADM) == expected


def test_without_admissible_list_any_command_is_ok():
    assert parse_action("<action>Dance</action>", None) == ("dance", OK)


def test_returns_the_envs_spelling():
    assert parse_action("<action>take RED key</action>", ["Take Red Key"]) == ("Take Red Key", OK)


FORMATS = ("tag", "tool_call", "json")


def assert_parsed(command, status) -> None:
    """What every parse returns: a known status, a bounded command, and a command exactly when the
    status names one (ok, several tags: the first, or not admissible: the proposal)."""
    assert status in STATUSES and isinstance(command, str) and len(command) <= 200
    assert (command == "") == (status not in (OK, MULTIPLE, NOT_ADMISSIBLE)), (command, status)


@given(TEXT, st.sampled_from(FORMATS), st.booleans(), st.booleans())
def test_any_text_never_raises(text, name, declared, with_list):
    fmt = ActionFormat.for_env(name, {"tools": TOOLS} if declared else {})
    assert_parsed(*fmt.parse(text, ADM if with_list else None))


def test_adversarial_strings_never_raise_in_any_format():
    """A fixed corpus of hard strings (nesting 100,000 deep, 10^5-character thoughts, lone surrogates),
    as replies, inside a tool call and inside a tool argument, in every format, with and without tools."""
    deep = ["<tool_call>" + "[" * 100_000 + "</tool_call>", "{" * 100_000, '{"name": "act", "arguments": ' * 5000]
    for text in [*adversarial_strings(600, seed=7), *deep]:
        for body in (text, f"<tool_call>{text}</tool_call>", f'{{"name": "go", "arguments": {{"direction": "{text}"}}}}'):
            for fmt in FORMATS:
                for tools in (None, list(TOOLS)):
                    assert_parsed(*parse_action(body, ["go north", "take key"], action_format=fmt, tools=tools))
    for text in adversarial_strings(1500):
        assert_parsed(*parse_action(text, ["go north", "take key"]))
        assert parse_action(text)[1] in STATUSES


def test_non_string_input():
    assert parse_action(None, ADM) == ("", NO_ACTION_TAG)
