"""Arithmetic: single-turn verifiable problems with exact answers (one step per episode).

The classic GRPO setting as a Gymnasium env: `reset` draws a problem from the seed, the
agent answers once, the episode ends. The env's own reward is 1 when the answer is the
exact number (``"42"``, ``"42.0"``, ``"-3"``, ``"1,024"`` all parse) and 0 otherwise;
`won` is the same verdict. Reward sources in `rewards/` (verifiers, rubrics, an LLM judge,
format) can replace or reweight it: each reads the reference from ``info["answer"]`` and
the problem type from ``info["task_type"]``, and the rubric shipped next to this file
(`envs/rubrics/arithmetic.yaml`, ``metadata["rubric"]``) scores by type.

Two families, each with difficulty levels (``gym.make(id, level=L)``):

    Arithmetic-v0    1: a + b, one digit        2: a +/- b up to 20
                     3: two-digit +/-, or a x b one digit
                     4: a x b up to 12, or a + b x c      5: (a + b) x c - d
    WordProblems-v0  1: one addition in a story  2: addition or subtraction
                     3: multiplication, or two steps (a + b x c)

Info contract (docs/design.md, Env info) plus ``answer`` (the exact answer as text) and ``task_type``.
`state_key` is the problem itself: the one state a group shares. `expert_action` is the
answer, so the SFT warm-up and the evaluation baselines work as for the multi-step envs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from envs.base import TextEnv, parse_number

RUBRIC = Path(__file__).parent / "rubrics" / "arithmetic.yaml"
MAX_LEVEL = {False: 5, True: 3}  # word_problems -> highest level
NAMES = ("Ada", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena")
ITEMS = ("apples", "marbles", "stickers", "coins", "books", "shells", "pencils", "cards")


class ArithmeticEnv(TextEnv):
    """One problem per episode; answer with the number. See the module docstring."""

    metadata = {**TextEnv.metadata, "prompt_template": "answer", "rubric": str(RUBRIC),
                "info_keys": ("state_key", "expert_action", "answer")}  # fmt: skip

    def __init__(self, level: int = 1, word_problems: bool = False, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        top = MAX_LEVEL[bool(word_problems)]
        if not isinstance(level, int) or not 1 <= level <= top:
            raise ValueError(f"level must be an integer in 1..{top} (got {level!r})")
        self.level, self.word_problems = level, bool(word_problems)
        self.question, self.answer, self.task_type = "", 0, ""

    # -- problems --------------------------------------------------------------------
    def _reset_state(self) -> None:
        make = self._word if self.word_problems else self._expression
        self.question, self.answer, self.task_type = make()

    def _between(self, lo: int, hi: int) -> int:
        """A uniform integer in [lo, hi] from the reset seed's generator."""
        return int(self.np_random.integers(lo, hi + 1))

    def _expression(self) -> tuple[str, int, str]:
        rng, n, level = self.np_random, self._between, self.level
        if level == 1:
            a, b = n(0, 9), n(0, 9)
            return f"What is {a} + {b}?", a + b, "add"
        if level == 2 or (level == 3 and rng.random() < 0.5):
            hi = 20 if level == 2 else 99
            a, b = n(0, hi), n(0, hi)
            if rng.random() < 0.5:
                return f"What is {a} + {b}?", a + b, "add"
            a, b = max(a, b), min(a, b)
            return f"What is {a} - {b}?", a - b, "sub"
        if level == 3 or (level == 4 and rng.random() < 0.5):
            hi = 9 if level == 3 else 12
            a, b = n(2, hi), n(2, hi)
            return f"What is {a} * {b}?", a * b, "mul"
        if level == 4:
            a, b, c = n(1, 20), n(2, 9), n(2, 9)
            return f"What is {a} + {b} * {c}?", a + b * c, "mixed"
        a, b, c, d = n(1, 12), n(1, 12), n(2, 9), n(0, 20)
        return f"What is ({a} + {b}) * {c} - {d}?", (a + b) * c - d, "mixed"

    def _word(self) -> tuple[str, int, str]:
        n = self._between
        name, item = NAMES[n(0, len(NAMES) - 1)], ITEMS[n(0, len(ITEMS) - 1)]
        kinds = {1: ("add",), 2: ("add", "sub"), 3: ("mul", "two-step")}[self.level]
        kind = kinds[n(0, len(kinds) - 1)]
        if kind == "add":
            a, b = n(2, 20), n(1, 20)
            q = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
            return q, a + b, "word-add"
        if kind == "sub":
            a = n(5, 30)
            b = n(1, a)
            q = f"{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?"
            return q, a - b, "word-sub"
        b, c = n(2, 9), n(2, 9)
        if kind == "mul":
            q = f"{name} buys {b} bags with {c} {item} in each bag. How many {item} does {name} buy?"
            return q, b * c, "word-mul"
        a = n(2, 20)
        q = f"{name} has {a} {item} and buys {b} bags with {c} {item} in each. How many {item} does {name} have now?"
        return q, a + b * c, "word-two-step"

    # -- TextEnv hooks ---------------------------------------------------------------
    def _apply(self, command: str) -> tuple[str, float, bool]:
        value = parse_number(command)
        correct = value is not None and math.isclose(value, self.answer, rel_tol=0.0, abs_tol=1e-9)
        self._won, self._lost = correct, not correct
        if value is None:
            return "That is not a number.", 0.0, False
        return ("Correct." if correct else "Incorrect."), float(correct), True

    def _describe(self) -> str:
        return self.question

    def _state_key(self) -> str:
        return f"{self.task_type}: {self.question}"

    def _expert(self) -> str | None:
        return str(self.answer)

    def _extra_info(self) -> dict[str, Any]:
        return {"answer": str(self.answer), "task_type": self.task_type}

    @property
    def task(self) -> str:
        return "Solve the problem. Answer with the number only."
