"""Inputs no parser may raise on, shared by the parser fuzzers (test_parser.py) and the env step
path's (test_faults.py): a fixed corpus of known-hard strings plus seeded random ones, and a
hypothesis strategy that mixes plain text, arbitrary bytes and tool-call fragments."""

from __future__ import annotations

import random
import string

from hypothesis import strategies as st

TEXT = st.one_of(  # any text, any bytes, and near-miss tool calls
    st.text(),
    st.binary().map(lambda b: b.decode("latin-1")),
    st.lists(st.sampled_from(['<tool_call>', '</tool_call>', '{', '}', '"name"', '"act"', '"go"', ':', ',',
                              '"arguments"', '"command"', '"direction"', '"north"', '[', ']', '<think>',
                              '</think>', ' ', '"x"', 'null', '1', 'true', '\\']), max_size=40).map("".join),
)


def adversarial_strings(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    fixed = ["", " ", "\x00", "\x00" * 50, "<action>", "</action>", "<action></action>", "<action><action>x</action>",
             "<action>" * 1000 + "go north" + "</action>" * 1000, "<think>" + "x" * 100_000, "<ACTION>GO NORTH</ACTION>",
             "<action>go\nnorth</action>", "<action>\u202ego north</action>", "<action>ｇｏ ｎｏｒｔｈ</action>",
             "<action>🐍🐍🐍</action>", "\ud800", "<action>take " + "a" * 10_000 + "</action>", "<action>-1e309</action>",
             "<action>1/0</action>", "<action>nan</action>", "<action>{answer}</action>", "%s%n%x", "'; DROP TABLE;--",
             "<action>go north</action><action>go south</action>", "\r\n\t\v\f", "<action> \t </action>"]  # fmt: skip
    alphabet = string.printable + "<>/\\{}\x00\x7f\u00e9\u4e2d\U0001f600"
    out = list(fixed)
    while len(out) < n:
        kind = rng.random()
        body = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        if kind < 0.3:
            out.append(body)
        elif kind < 0.6:
            out.append(f"<think>{body}</think><action>{body[: rng.randint(0, 40)]}</action>")
        elif kind < 0.8:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))).decode("latin-1"))
        else:
            out.append(f"<action>{rng.choice(['go', 'take', 'unlock', 'guess', ''])} {body[:30]}</action>")
    return out
