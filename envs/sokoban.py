"""Sokoban: push every box onto a goal; a multi-step built-in env with levels and an optimal expert.

Each reset draws a puzzle from the reset seed (`envs/sokoban_board.py`: reverse play from the
solved board, so every puzzle is solvable, kept only if the solver's optimal plan fits the
level's move range). Seeds 0..N-1 are the training tasks and seeds from HELD_OUT_SEED on the
held-out ones, as for KeyDoor: a procedural env draws a fresh puzzle from any seed. The G envs
of a group share a seed and so a puzzle, and equal boards recur across their rollouts:
`state_key` is the board itself, which is what GiGPO's anchor states need.

Commands: `up`, `down`, `left`, `right` (`move up`, `go up` and `push up` are read the same).
Walking into a box pushes it when the cell beyond is free. `admissible_commands` lists only
the moves that change the board, as KeyDoor lists only the exits that are open: a move into
a wall is an invalid action (`action_valid=False`, the board unchanged).

Reward follows KeyDoor: 1 when the last box reaches a goal (terminated, won), 0 otherwise,
no step penalty. A push that deadlocks the board (a box on a dead square such as a corner
without a goal, or a frozen 2x2 block) ends the episode lost: terminated, `lost=True`, reward 0.
`expert_action` is the next move of a shortest plan from the current board (A*, replanned
when the agent leaves the plan; plans are cached by board), None once no plan is found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envs.base import StepInfo, TextEnv
from envs.sokoban_board import LEGEND, MOVES, State, deadlock_at, generate, move, parse, render, solve


@dataclass(frozen=True)
class Level:
    """A difficulty: interior size, boxes, extra walls, and the range of optimal plan lengths."""

    width: int
    height: int
    boxes: int
    walls: int  # interior wall cells added to the empty room
    min_moves: int  # the shortest plan has at least this many moves: no trivial puzzles
    max_steps: int  # the step limit registered with the id; plans are at most half of it

    @property
    def moves(self) -> tuple[int, int]:
        return self.min_moves, self.max_steps // 2


LEVELS = {
    1: Level(width=5, height=5, boxes=1, walls=3, min_moves=6, max_steps=30),
    2: Level(width=6, height=6, boxes=2, walls=5, min_moves=10, max_steps=60),
    3: Level(width=7, height=7, boxes=2, walls=8, min_moves=15, max_steps=80),
    4: Level(width=8, height=8, boxes=3, walls=10, min_moves=20, max_steps=120),
}
ALIASES = ("move ", "go ", "push ")


class SokobanEnv(TextEnv):
    """Sokoban: push every box onto a goal. See the module docstring."""

    metadata = {**TextEnv.metadata, "info_keys": ("state_key", "admissible_commands", "expert_action")}

    def __init__(self, level: int = 1, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if not isinstance(level, int) or level not in LEVELS:
            raise ValueError(f"level must be an integer in 1..{max(LEVELS)} (got {level!r})")
        self.level = level
        self._board_text: str | None = None
        self._plans: dict[State, str | None] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, StepInfo]:
        """`options={"board": text}` plays that board (symbols: LEGEND) instead of drawing one."""
        self._board_text = (options or {}).get("board")
        return super().reset(seed=seed, options=options)

    # -- dynamics --------------------------------------------------------------------
    def _reset_state(self) -> None:
        lv = LEVELS[self.level]
        if self._board_text is None:
            self.puzzle, plan = generate(self.np_random, lv.width, lv.height, lv.boxes, lv.walls, lv.moves)
        else:
            self.puzzle = parse(self._board_text)
            plan = []  # planned on demand by _expert
        self.state = self.puzzle.start
        self._plans = {}  # board -> next move of a shortest plan from it; None: no plan found
        self._remember(self.state, plan)

    def _apply(self, command: str) -> tuple[str, float, bool]:
        for alias in ALIASES:
            command = command.removeprefix(alias)
        if command not in MOVES:
            return "Unknown move; use up, down, left or right.", 0.0, False
        result = move(self.puzzle, self.state, command)
        if result is None:
            return self._blocked(command), 0.0, False
        self.state, pushed = result
        if not pushed:
            return f"You move {command}.", 0.0, True
        boxes = self.state[1]
        if self.puzzle.solved(boxes):
            self._won = True
            return f"You push the box {command}. Every box is on a goal. You win!", 1.0, True
        reason = deadlock_at(self.puzzle, boxes, self.state[0] + self.puzzle.offset(command))
        if reason:
            self._lost = True
            return f"You push the box {command}. Now {reason}. You lose.", 0.0, True
        return f"You push the box {command}.", 0.0, True

    def _blocked(self, direction: str) -> str:
        target = self.state[0] + self.puzzle.offset(direction)
        if target in self.puzzle.walls:
            return f"A wall blocks the way {direction}."
        return f"The box cannot be pushed {direction}: a wall or another box is behind it."

    # -- views -----------------------------------------------------------------------
    @property
    def task(self) -> str:
        return (
            "Push every box onto a goal. Moves: up, down, left, right; walking into a box pushes it if "
            "the cell beyond is free. Boxes cannot be pulled, and a box pushed into a corner without "
            f"a goal is stuck for good. Legend: {LEGEND}."
        )

    def board(self) -> str:
        """The current board as rows of text (symbols: LEGEND)."""
        return render(self.puzzle, self.state)

    def _describe(self) -> str:
        boxes, goals = self.state[1], self.puzzle.goals
        return f"Board:\n{self.board()}\nBoxes on goals: {len(boxes & goals)} of {len(goals)}."

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return f"{self.board()}\nLegend: {LEGEND}"
        return None

    def _state_key(self) -> str:
        return "/".join(self.board().splitlines())

    def _admissible(self) -> list[str]:
        return [m for m in MOVES if move(self.puzzle, self.state, m) is not None]

    def _expert(self) -> str | None:
        """Next move of a shortest plan; solved again only for a board no earlier plan passed through."""
        if self.state not in self._plans:
            plan = solve(self.puzzle, self.state)
            self._plans[self.state] = plan[0] if plan else None
            self._remember(self.state, plan or [])
        return self._plans[self.state]

    def _remember(self, state: State, plan: list[str]) -> None:
        """Cache the plan's move at every board it passes through (a suffix of a shortest plan is one too)."""
        for m in plan:
            self._plans.setdefault(state, m)
            state = move(self.puzzle, state, m)[0]
