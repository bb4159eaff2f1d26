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

import contextlib
import errno
import math
import os
import re
import string
import sys
import tempfile
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


class StorageError(OSError):
    """A folder a run writes to cannot take its files (the cache, the run directory, its checkpoints): one
    line naming the path, the setting that chose it and the reason; the trainer exits 2."""


def check_cache(folder: Path | None = None) -> None:
    """StorageError unless the cache, or `folder` in it, can be written: before anything is built into it."""
    setting = "TEXTRL_CACHE" if "TEXTRL_CACHE" in os.environ else "the cache folder (TEXTRL_CACHE unset)"
    if problem := storage_problem(folder or cache_dir(), setting):
        raise StorageError(f"{problem}; point TEXTRL_CACHE at a writable folder with room")


def storage_problem(path: str | os.PathLike, setting: str, longest: str = "") -> str | None:
    """Why `path` (chosen by `setting`, e.g. TEXTRL_CACHE or --output-dir) cannot take files, in one line, or
    None. A probe file is written and removed in the folder; a folder still to be made is probed by making one
    of this check's own beside where it goes (the probe file inside it), removed again: nothing the user named
    is created, and processes that check one new folder at once (torchrun's ranks) never meet. `longest`: the
    longest path the caller writes under `path` (relative); it must fit the filesystem's limits too."""
    path = Path(path).expanduser()
    problem = _probe(path, longest)
    return f"{setting} {path}{problem}" if problem else None


def _probe(path: Path, longest: str) -> str | None:
    """What is wrong with `path`, as the end of `storage_problem`'s line, or None."""
    doing = "cannot use it"
    try:
        existing = next(p for p in (path, *path.parents) if os.path.lexists(p))
        where = "" if existing == path else f": {existing}"
        if existing.is_symlink() and not existing.exists():
            return f"{where} links to {os.readlink(existing)}, which does not exist"
        if not existing.is_dir():
            return f"{where} is a file, not a folder"
        missing = path.parts[len(existing.parts) :]  # the folders still to make, outermost first
        doing = "cannot write in it" if not missing else "cannot create it" if len(missing) == 1 else \
            f"cannot create {existing / missing[0]}"  # fmt: skip
        path_max, name_max = _limit(existing, "PC_PATH_MAX", 4096), _limit(existing, "PC_NAME_MAX", 255)
        if len(os.fsencode(path)) >= path_max or any(len(os.fsencode(name)) > name_max for name in missing):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))  # what making it would raise
        if longest and (problem := _too_long(path, longest, path_max, name_max)):
            return f": {problem}"
        folder = None if existing == path else tempfile.mkdtemp(dir=existing, prefix=".textrl-probe-")
        try:
            fd, probe = tempfile.mkstemp(dir=folder or path, prefix=".textrl-probe-")
            try:
                os.write(fd, b"probe")
            finally:
                os.close(fd)
                os.unlink(probe)
        finally:
            if folder is not None:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)
    except OSError as e:
        return f": {doing} ({e.strerror or e})"
    return None


def write_fault(error: BaseException) -> str | None:
    """The filesystem's reason for an error raised while writing files: an OSError's, or the errno that a
    library wraps in its own exception (safetensors: "I/O error: No space left on device (os error 28)");
    None when it is not one."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    found = re.search(r"\(os error (\d+)\)", str(error))
    return os.strerror(int(found.group(1))) if found else None


def _too_long(path: Path, longest: str, path_max: int, name_max: int) -> str | None:
    """Why the files `longest` under `path` break the filesystem's limits on a whole path and on a name, or None."""
    full = len(os.fsencode(path / longest))
    name = max(len(os.fsencode(part)) for part in Path(longest).parts)
    if full < path_max and name <= name_max:
        return None
    return (f"the files under it would have paths of up to {full} bytes and names of up to {name}, over this "
            f"filesystem's {path_max - 1} and {name_max} ({os.strerror(errno.ENAMETOOLONG)})")  # fmt: skip


def _limit(path: Path, name: str, default: int) -> int:
    """A filesystem limit (os.pathconf), or Linux's usual value where it cannot be read."""
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):
        return default


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
