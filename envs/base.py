"""TextEnv: the base class of every text environment in this package.

A TextEnv is a plain `gymnasium.Env[str, str]`: observations and actions are strings,
`step` returns Gymnasium's 5-tuple, and `reward` is the reward of this step only.
What makes it usable by the trainer is the info contract (docs/design.md, Env info), filled
on every `reset` and `step` and declared as the TypedDict `StepInfo`:

    state_key            canonical description of the true state (GiGPO anchors)
    admissible_commands  list[str] | None
    won, lost            bool
    expert_action        str | None: a next action of a good policy
    task                 the goal text shown to the agent
    action_valid         False when the last action was not a legal command
    answer, task_type    optional: a reference answer and the problem type (single-turn envs)
    game, error          optional: the game file, and what failed when the env did (TextWorld)

Subclasses implement `_reset_state`, `_apply`, `_describe`, `_state_key`,
`_admissible` and `_expert`; the base class assembles observations and info so that
every env fills the contract the same way. Invalid actions never raise: the env
answers with feedback and `action_valid=False`.
"""

from __future__ import annotations

import math
import os
import re
import string
import sys
from pathlib import Path
from typing import Any, TypedDict

import gymnasium as gym
from gymnasium import spaces

# Printable ASCII: letters, digits, punctuation and whitespace. The default Text charset
# is alphanumeric only and rejects sentences (and then fails check_env).
CHARSET = frozenset(string.printable)
MAX_TEXT = 8192
# Reset seeds >= this select held-out tasks. Procedural envs draw a fresh layout from any
# seed; envs with a finite pool of games (TextWorld) map these seeds to their held-out split.
HELD_OUT_SEED = 1_000_000_000


def cache_dir() -> Path:
    """Where generated artefacts (the tiny model, TextWorld games) are cached."""
    return Path(os.environ.get("TEXTRL_CACHE", Path.home() / ".cache" / "textrl"))


_NOTED: set[str] = set()


def note_once(message: str) -> None:
    """A one-line note on stderr, once per process (a fallback the user should know about)."""
    if message not in _NOTED:
        _NOTED.add(message)
        print(f"note: {message}", file=sys.stderr)


def choose(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """A choice option's check: one line listing the choices."""
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


def at_least(name: str, value: float, low: float) -> None:
    if not value >= low:  # NaN fails too
        raise ValueError(f"{name} must be >= {low:g} (got {value})")


def text_space(min_length: int = 1) -> spaces.Text:
    return spaces.Text(max_length=MAX_TEXT, min_length=min_length, charset=CHARSET)


def clean_action(action: Any) -> str:
    """Any model output -> one lowercase command line with single spaces."""
    text = action if isinstance(action, str) else str(action)
    return " ".join(text.lower().split())


def fit_text(text: str) -> str:
    """Keep observations inside the Text space: printable ASCII, bounded length."""
    text = "".join(ch if ch in CHARSET else "?" for ch in text)
    return text[:MAX_TEXT] or "."


class EnvInfo(TypedDict):
    """The info keys every built-in env fills on every `reset` and `step` (docs/design.md, Env info)."""

    state_key: str  # the true state, never the feedback text alone: equal keys = one GiGPO anchor
    admissible_commands: list[str] | None  # None: no command list (free text), or the episode ended
    won: bool
    lost: bool
    expert_action: str | None  # a next action of a good policy; None once the episode ended
    task: str  # the goal text shown to the agent
    action_valid: bool  # False when the last action was not a legal command (True after reset)


class StepInfo(EnvInfo, total=False):
    """`EnvInfo` plus the keys some envs add (docs/design.md, Env info)."""

    answer: str  # the reference answer as text (single-turn envs): verifiers, rubrics, judges
    task_type: str  # the problem type (single-turn envs): selects the rubric
    game: str  # the game file being played (TextWorld)
    error: str  # the env failed on this step; the episode ended truncated


class TextEnv(gym.Env[str, str]):
    """Base class: a turn-based text game with the info contract of docs/design.md (Env info)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = text_space(min_length=1)
        self.action_space = text_space(min_length=0)
        self.render_mode = render_mode
        self._last_obs = ""
        self._won = False
        self._lost = False

    # -- subclass hooks ----------------------------------------------------------
    def _reset_state(self) -> None:
        raise NotImplementedError

    def _apply(self, command: str) -> tuple[str, float, bool]:
        """Apply a cleaned command. Returns (feedback, reward, action_valid)."""
        raise NotImplementedError

    def _describe(self) -> str:
        raise NotImplementedError

    def _state_key(self) -> str:
        raise NotImplementedError

    def _admissible(self) -> list[str] | None:
        return None

    def _expert(self) -> str | None:
        return None

    def _extra_info(self) -> dict[str, Any]:
        """Env-specific info keys beyond the contract (e.g. a reference answer): keys of `StepInfo`."""
        return {}

    @property
    def task(self) -> str:
        raise NotImplementedError

    # -- Gymnasium API -------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, StepInfo]:
        super().reset(seed=seed)
        self._won = self._lost = False
        self._reset_state()
        self._last_obs = fit_text(self._describe())
        return self._last_obs, self._info(action_valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]:
        if self._won or self._lost:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        feedback, reward, valid = self._apply(clean_action(action))
        done = self._won or self._lost
        text = feedback if done else f"{feedback} {self._describe()}"
        self._last_obs = fit_text(text)
        return self._last_obs, float(reward), done, False, self._info(action_valid=valid)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    def _info(self, action_valid: bool) -> StepInfo:
        done = self._won or self._lost
        return {
            "state_key": self._state_key(),
            "admissible_commands": None if done else self._admissible(),
            "won": self._won,
            "lost": self._lost,
            "expert_action": None if done else self._expert(),
            "task": self.task,
            "action_valid": action_valid,
            **self._extra_info(),
        }


_NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d*)?$|^[-+]?\.\d+$")


def parse_number(text: str) -> float | None:
    """The number a short answer states, or None: "42", "-3", "42.0", "1,024", "3/4", "42."."""
    text = str(text).strip()
    text = text[:-1] if text.endswith(".") else text  # "42." ends a sentence
    if "/" in text:
        num, _, den = text.partition("/")
        a, b = parse_number(num), parse_number(den)
        return a / b if a is not None and b not in (None, 0.0) else None
    if len(text) > 64 or not _NUMBER.match(text):
        return None
    value = float(text.replace(",", ""))
    return value if math.isfinite(value) else None
