import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.parser import EMPTY, MULTIPLE, NO_ACTION_TAG, NOT_ADMISSIBLE, OK, STATUSES, parse_action

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


@given(st.one_of(st.text(), st.binary().map(lambda b: b.decode("latin-1"))))
def test_any_text_never_raises(text):
    command, status = parse_action(text, ADM)
    assert status in STATUSES and len(command) <= 200


def test_non_string_input():
    assert parse_action(None, ADM) == ("", NO_ACTION_TAG)
