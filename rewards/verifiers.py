"""Verifier checks: pure functions from a response (or its parsed answer) to a score in [0, 1].

The standalone scorers (`exact`, `numeric`, `regex`, `format`) and the rubric criteria
both call these, so a rubric's `check: numeric` and `--reward numeric` mean the same thing.
None of them raises on odd text: a response that is not a number scores 0 under `numeric`,
it is not an error. Errors are reserved for a scorer that cannot score at all (no
reference answer, a judge that does not answer).
"""

from __future__ import annotations

import math
import re

from envs.base import parse_number

# <think>...</think> (optional), then exactly one non-empty <action>...</action>, nothing else.
_FORMAT = re.compile(r"^\s*(<think>(?:(?!</?think>).)*</think>\s*)?<action>[^<>]*\S[^<>]*</action>\s*$", re.DOTALL)


def normalize(text: str) -> str:
    return " ".join(str(text).lower().split())


def exact(text: str, answer: str) -> float:
    """1 when the texts agree up to case and repeated whitespace."""
    return float(normalize(text) == normalize(answer))


def numeric(text: str, answer: str, tolerance: float = 1e-6, rel_tolerance: float = 0.0,
            partial_within: float = 0.0) -> float:  # fmt: skip
    """1 when `text` states the reference number within the tolerances (absolute, relative).
    With `partial_within` = r > 0 a miss earns 1 - |error| / (r * max(1, |answer|)), floored at
    0: partial credit for near misses."""
    value, target = parse_number(text), parse_number(answer)
    if target is None:
        raise ValueError(f"the reference answer {answer!r} is not a number")
    if value is None:
        return 0.0
    if math.isclose(value, target, rel_tol=rel_tolerance, abs_tol=tolerance):
        return 1.0
    if partial_within <= 0:
        return 0.0
    return max(0.0, 1.0 - abs(value - target) / (partial_within * max(1.0, abs(target))))


def answer_pattern(pattern: str, answer: str | None) -> re.Pattern:
    """Compile a pattern; `{answer}` in it stands for the escaped reference answer."""
    if "{answer}" in pattern:
        if answer is None:
            raise ValueError("the pattern uses {answer} but the task has no reference answer")
        pattern = pattern.replace("{answer}", re.escape(answer))
    return re.compile(pattern, re.DOTALL)


def regex(text: str, pattern: str, answer: str | None = None) -> float:
    """1 when the pattern is found in the text (re.search)."""
    return float(answer_pattern(pattern, answer).search(text) is not None)


def contains(text: str, needle: str) -> float:
    return float(normalize(needle) in normalize(text))


def max_length(text: str, max_chars: int) -> float:
    """1 when the text is at most `max_chars` characters long (stripped)."""
    return float(len(text.strip()) <= max_chars)


def well_formed(response: str) -> float:
    """The format reward: optional <think>...</think>, then one non-empty <action>...</action>
    and nothing else around them."""
    return float(_FORMAT.match(response) is not None)
