"""Guess the number: a secret number from 1 to `high`, drawn from the reset seed; after each
guess the env says "higher" or "lower". A plain `gymnasium.Env[str, str]` (no base class from
textrl needed) that fills the trainer's info contract:

    state_key            the interval the secret can still be in: equal intervals are equal
                         states (GiGPO's anchor states), whatever the feedback text said
    admissible_commands  "guess 1" .. "guess <high>"
    expert_action        binary search: guess the middle of the interval
    won, lost, task, action_valid

BareGuessNumberEnv plays the same game but gives only `won`: no state key, no admissible
commands, no expert. The trainer still runs it (see docs/custom_envs.md for what changes).
"""

from __future__ import annotations

import string

import gymnasium as gym
from gymnasium import spaces

CHARSET = frozenset(string.printable)  # sentences need spaces and punctuation


class GuessNumberEnv(gym.Env[str, str]):
    """Guess a secret number from 1 to `high`; the env answers higher or lower."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, high: int = 8, render_mode: str | None = None) -> None:
        if not isinstance(high, int) or high < 2:
            raise ValueError(f"high must be an integer >= 2 (got {high!r})")
        self.high, self.render_mode = high, render_mode
        self.observation_space = spaces.Text(max_length=4096, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(max_length=4096, min_length=0, charset=CHARSET)
        self.secret, self.lo, self.hi, self.won = 1, 1, high, False
        self.obs = ""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(1, self.high + 1))
        self.lo, self.hi, self.won = 1, self.high, False
        self.obs = f"I am thinking of a number from 1 to {self.high}."
        return self.obs, self._info(valid=True)

    def step(self, action: str):
        words = str(action).lower().split()
        number = int(words[-1]) if words and words[-1].isdigit() and len(words[-1]) < 6 else None
        valid = number is not None and 1 <= number <= self.high
        if not valid:
            self.obs = f"Say 'guess N' with N from 1 to {self.high}."
        elif number == self.secret:
            self.won, self.obs = True, f"Yes, it is {number}!"
        elif number < self.secret:
            self.lo = max(self.lo, number + 1)
            self.obs = f"{number} is too low: higher."
        else:
            self.hi = min(self.hi, number - 1)
            self.obs = f"{number} is too high: lower."
        return self.obs, float(self.won), self.won, False, self._info(valid)

    def render(self):
        return self.obs if self.render_mode == "ansi" else None

    def _info(self, valid: bool) -> dict:
        return {
            "state_key": f"between {self.lo} and {self.hi}",
            "admissible_commands": None if self.won else [f"guess {n}" for n in range(1, self.high + 1)],
            "expert_action": None if self.won else f"guess {(self.lo + self.hi) // 2}",
            "won": self.won,
            "lost": False,
            "task": f"Find the secret number from 1 to {self.high}.",
            "action_valid": valid,
        }


class BareGuessNumberEnv(GuessNumberEnv):
    """The same game with only the `won` info key."""

    def _info(self, valid: bool) -> dict:
        return {"won": self.won}
