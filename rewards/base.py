"""What a scorer sees (RewardItem) and what it is (Scorer).

A scorer maps a batch of items to one score per item, or None for an item it could not
score (counted as an error, never a crash). Batches matter for the LLM judge, which scores
many responses in one forward pass; verifier functions score one item at a time through
`FunctionScorer`.

Scope: "step" scorers (the env's reward, the format reward) score every env step;
"outcome" scorers (verifiers, rubrics, judges) score the answer, i.e. the last step of an
episode, against the reference answer the env gives in `info["answer"]`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agents.parser import parse_action

STEP, OUTCOME = "step", "outcome"
JUDGE_MODES = ("expected", "generate")  # how the judge grades (rewards/judge.py)


@dataclass(frozen=True)
class RewardItem:
    """One response to score, with everything a scorer may look at."""

    question: str  # what the agent answered: the observation of that step
    response: str  # the model's full text
    action: str = ""  # the command parsed from it ("" when none)
    answer: str | None = None  # the reference answer (info["answer"]), if the env has one
    task_type: str = ""  # info["task_type"]: selects the rubric
    task: str = ""
    env_reward: float = 0.0
    response_tokens: int = 0

    @classmethod
    def from_response(cls, question: str, response: str, answer: str | None = None, **kw) -> RewardItem:
        """An item built by hand (tests, honeypots, probes): the action is parsed as the agent does."""
        action, _ = parse_action(response)
        return cls(question=question, response=response, action=action, answer=answer, **kw)


class Scorer(Protocol):
    name: str
    scope: str  # STEP or OUTCOME

    def score(self, items: list[RewardItem]) -> list[float | None]: ...


class FunctionScorer:
    """A per-item function as a scorer; an exception or a non-finite value scores None."""

    def __init__(self, name: str, fn: Callable[[RewardItem], float], scope: str = OUTCOME,
                 needs_answer: bool = True) -> None:  # fmt: skip
        self.name, self.fn, self.scope, self.needs_answer = name, fn, scope, needs_answer
        self.last_errors: list[str] = []

    def score(self, items: list[RewardItem]) -> list[float | None]:
        out: list[float | None] = []
        self.last_errors = []
        for item in items:
            try:
                if self.needs_answer and item.answer is None:
                    raise ValueError("no reference answer (the env gives no info['answer'])")
                out.append(finite(self.fn(item)))
            except Exception as e:  # a scorer bug on one response must not end the run
                self.last_errors.append(f"{type(e).__name__}: {e}")
                out.append(None)
        return out


def finite(value) -> float:
    """A score as a float; text, NaN and inf are errors (a scorer that returns "1" has a bug)."""
    if isinstance(value, str | bytes):
        raise TypeError(f"score {value!r} is {type(value).__name__}, not a number")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"non-finite score {value}")
    return value


def score_batch(scorer: Scorer, items: list[RewardItem], errors: list[str] | None = None) -> list[float | None]:
    """`scorer.score` that never raises: a batch that fails is retried item by item, so one bad
    response costs one error, not the batch; wrong-length, non-numeric or non-finite output is an
    error. `errors`, when given, gets one line per failed item saying why."""
    if not items:
        return []
    try:
        scores = list(scorer.score(items))
        if len(scores) != len(items):
            raise ValueError(f"{scorer.name} returned {len(scores)} scores for {len(items)} items")
    except Exception as e:
        if len(items) > 1:
            return [s for item in items for s in score_batch(scorer, [item], errors)]
        if errors is not None:
            errors.append(f"{type(e).__name__}: {e}")
        return [None]
    why = iter(getattr(scorer, "last_errors", None) or [])  # FunctionScorer: why each None
    out: list[float | None] = []
    for s in scores:
        try:
            if s is None:
                raise ValueError(next(why, "scored None"))
            out.append(finite(s))
        except (TypeError, ValueError) as e:
            if errors is not None:
                errors.append(str(e) if s is None else f"{type(e).__name__}: {e}")
            out.append(None)
    return out
