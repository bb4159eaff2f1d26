"""Sokoban boards: drawing and parsing, moves, deadlocks, an A* solver and a reverse-play generator.

The game logic of `envs/sokoban.py`, kept free of Gymnasium so that it can be read and tested
on hand-made boards. A cell is an int, `row * width + column` on a board that includes its
border of walls, so neighbours are `cell +/- 1` and `cell +/- width`. A state is
`(player cell, frozenset of box cells)`; walls and goals never change and live in `Puzzle`.

- **Deadlocks** (`deadlock_at`): a box off a goal on a *dead square*, from which no sequence
  of pushes reaches any goal even on an otherwise empty board (corners, and wall runs without
  a goal), or a box off a goal in a 2x2 block of walls and boxes (a frozen block: none of
  its boxes can ever move). Both rules are sound: a flagged state is never solvable.
- **Solver** (`solve`): A* over single moves, so plans are shortest in moves. The heuristic,
  pushes each box needs on an empty board plus the walk to the nearest box, never
  overestimates and changes by at most one per move, so the first plan found is optimal.
  It gives up after `max_nodes` expanded boards (a count, not a clock, so results never
  depend on the machine's speed): SOLVER_NODES is about 2 s of one core, the time bound.
  (A* over pushes, with walks as edge costs, expands fewer boards but each costs a walk
  search; on these small rooms it was several times slower.)
- **Generator** (`generate`): start from the solved state and play backwards: the player
  walks and pulls boxes. Every pull is the reverse of a legal push, so the final position
  is solvable by construction; it is kept when the solver solves it within its budget and
  the optimal plan's length is in the level's range (not trivial, and short enough for
  the step limit).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

MOVES = ("up", "down", "left", "right")
LEGEND = "# wall, _ floor, @ you, $ box, . goal, * box on a goal, + you on a goal"
SOLVER_NODES = 100_000  # A* expansions for the expert: about 2 s of one core at most
GENERATE_NODES = 10_000  # a drawn puzzle is kept only if solved within this: resets stay fast

State = tuple[int, frozenset[int]]


@dataclass(frozen=True)
class Puzzle:
    """The fixed part of a board (walls, goals; the border included) and its start state."""

    width: int
    height: int
    walls: frozenset[int]
    goals: frozenset[int]
    start: State
    # derived in __post_init__: pushes from each live cell to its nearest goal on an empty board
    push_dist: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "push_dist", _push_distances(self))

    def offset(self, move: str) -> int:
        return {"up": -self.width, "down": self.width, "left": -1, "right": 1}[move]

    def solved(self, boxes: frozenset[int]) -> bool:
        return boxes <= self.goals


def _push_distances(p: Puzzle) -> dict[int, int]:
    """Breadth-first *pulls* from every goal: a box can reach a goal iff its cell gets a distance."""
    dist = {g: 0 for g in p.goals}
    queue = deque(sorted(p.goals))
    while queue:
        cell = queue.popleft()
        for move in MOVES:
            o = p.offset(move)
            # a box on cell + o is pushed onto cell by a player standing on cell + 2o
            if cell + o not in p.walls and cell + 2 * o not in p.walls and cell + o not in dist:
                dist[cell + o] = dist[cell] + 1
                queue.append(cell + o)
    return dist


# -- text ------------------------------------------------------------------------------------
def render(p: Puzzle, state: State) -> str:
    """The board as rows of text, in the symbols of LEGEND."""
    player, boxes = state
    rows = []
    for r in range(p.height):
        row = ""
        for c in range(p.width):
            cell = r * p.width + c
            if cell in p.walls:
                row += "#"
            elif cell in boxes:
                row += "*" if cell in p.goals else "$"
            elif cell == player:
                row += "+" if cell in p.goals else "@"
            else:
                row += "." if cell in p.goals else "_"
        rows.append(row)
    return "\n".join(rows)


def parse(text: str) -> Puzzle:
    """A board in the symbols of LEGEND (a space or `-` is floor too); short rows are padded with walls."""
    rows = [line for line in text.strip("\n").splitlines() if line.strip()]
    width = max(len(r) for r in rows)
    walls, goals, boxes, players = set(), set(), set(), []
    for r, line in enumerate(rows):
        for c, ch in enumerate(line.ljust(width, "#")):
            cell = r * width + c
            if ch == "#":
                walls.add(cell)
            if ch in ".*+":
                goals.add(cell)
            if ch in "$*":
                boxes.add(cell)
            if ch in "@+":
                players.append(cell)
            if ch not in "#_ -.$*@+":
                raise ValueError(f"unknown board symbol {ch!r} (legend: {LEGEND})")
    if len(players) != 1 or len(boxes) != len(goals) or not boxes:
        raise ValueError("a board needs one player and as many boxes as goals (at least one)")
    return Puzzle(width, len(rows), frozenset(walls), frozenset(goals), (players[0], frozenset(boxes)))


# -- rules -----------------------------------------------------------------------------------
def move(p: Puzzle, state: State, direction: str) -> tuple[State, bool] | None:
    """(next state, whether a box was pushed), or None when a wall or a blocked box stops the move."""
    player, boxes = state
    o = p.offset(direction)
    target = player + o
    if target in p.walls:
        return None
    if target not in boxes:
        return (target, boxes), False
    beyond = target + o
    if beyond in p.walls or beyond in boxes:
        return None
    return (target, (boxes - {target}) | {beyond}), True


def deadlock_at(p: Puzzle, boxes: frozenset[int], cell: int) -> str | None:
    """Why the box on `cell` makes the position unsolvable, or None (rules: the module docstring)."""
    if cell not in p.goals and cell not in p.push_dist:
        return "a box is stuck where it can never reach a goal"
    w = p.width
    for corner in (cell, cell - 1, cell - w, cell - w - 1):  # the four 2x2 blocks holding `cell`
        block = (corner, corner + 1, corner + w, corner + w + 1)
        if all(c in p.walls or c in boxes for c in block) and any(c in boxes and c not in p.goals for c in block):
            return "boxes are frozen against each other and the walls"
    return None


def deadlock(p: Puzzle, boxes: frozenset[int]) -> str | None:
    """The first deadlock among all boxes, or None."""
    for cell in sorted(boxes):
        reason = deadlock_at(p, boxes, cell)
        if reason:
            return reason
    return None


# -- solver ----------------------------------------------------------------------------------
def _heuristic(p: Puzzle, state: State) -> int:
    """A lower bound on the moves left: each box's pushes to its nearest goal, plus the walk to a box."""
    player, boxes = state
    pushes = sum(p.push_dist[b] for b in boxes)
    if pushes == 0:
        return 0
    pr, pc = divmod(player, p.width)
    walk = min(abs(pr - b // p.width) + abs(pc - b % p.width) for b in boxes) - 1
    return pushes + max(walk, 0)


def solve(p: Puzzle, state: State, max_nodes: int = SOLVER_NODES) -> list[str] | None:
    """A shortest list of moves from `state` to the solved board; None if unsolvable or over budget."""
    if p.solved(state[1]):
        return []
    if deadlock(p, state[1]):
        return None
    came: dict[State, tuple[State, str] | None] = {state: None}
    best = {state: 0}
    tie = 0
    frontier = [(_heuristic(p, state), 0, tie, state)]
    expanded = 0
    while frontier:
        _, neg_g, _, s = heapq.heappop(frontier)
        if -neg_g > best[s]:
            continue  # a stale entry: a shorter way here was found after it was queued
        if p.solved(s[1]):
            plan = []
            while came[s] is not None:
                s, m = came[s]
                plan.append(m)
            return plan[::-1]
        expanded += 1
        if expanded > max_nodes:
            return None
        for m in MOVES:
            result = move(p, s, m)
            if result is None:
                continue
            nxt, pushed = result
            if pushed and deadlock_at(p, nxt[1], nxt[0] + p.offset(m)):
                continue  # pruned: no plan passes through a deadlock
            g = best[s] + 1
            if g < best.get(nxt, g + 1):
                best[nxt], came[nxt] = g, (s, m)
                tie += 1  # equal f: deeper first (-g), then first queued, so plans are deterministic
                heapq.heappush(frontier, (g + _heuristic(p, nxt), -g, tie, nxt))
    return None


# -- generator -------------------------------------------------------------------------------
def _room(rng: np.random.Generator, width: int, height: int, inner_walls: int) -> tuple[int, frozenset[int]]:
    """A walled `width` x `height` interior with up to `inner_walls` extra walls, floor kept connected."""
    w = width + 2
    border = {r * w + c for r in range(height + 2) for c in range(w) if r in (0, height + 1) or c in (0, w - 1)}
    interior = sorted(r * w + c for r in range(1, height + 1) for c in range(1, w - 1))
    floor, added = set(interior), 0
    for i in rng.permutation(len(interior)):
        if added == inner_walls:
            break
        trial = floor - {interior[i]}
        if _connected(trial, w):
            floor, added = trial, added + 1
    return w, frozenset(border | (set(interior) - floor))


def _connected(floor: set[int], w: int) -> bool:
    start = min(floor)
    seen, todo = {start}, [start]
    while todo:
        cell = todo.pop()
        for n in (cell - 1, cell + 1, cell - w, cell + w):
            if n in floor and n not in seen:
                seen.add(n)
                todo.append(n)
    return len(seen) == len(floor)


def _reverse_play(rng: np.random.Generator, p: Puzzle, steps: int, pull_chance: float = 0.7) -> State:
    """Walk and pull boxes from the solved state; each pull undoes a legal push."""
    player, boxes = p.start
    for _ in range(steps):
        walks, pulls = [], []
        for m in MOVES:
            o = p.offset(m)
            if player + o in p.walls or player + o in boxes:
                continue
            walks.append(o)
            if player - o in boxes:
                pulls.append(o)
        if not walks:
            break
        pull = bool(pulls) and rng.random() < pull_chance
        options = pulls if pull else walks
        o = options[int(rng.integers(len(options)))]
        if pull:  # the box behind the player follows it onto the cell it leaves
            boxes = (boxes - {player - o}) | {player}
        player += o
    return player, boxes


def generate(
    rng: np.random.Generator,
    width: int,
    height: int,
    num_boxes: int,
    inner_walls: int,
    moves: tuple[int, int],
    attempts: int = 500,
) -> tuple[Puzzle, list[str]]:
    """A puzzle drawn from `rng` whose optimal plan has between moves[0] and moves[1] moves, and that plan."""
    for _ in range(attempts):
        w, walls = _room(rng, width, height, inner_walls)
        floor = [c for c in range(w * (height + 2)) if c not in walls]
        picks = [floor[i] for i in rng.permutation(len(floor))[: num_boxes + 1]]
        goals = frozenset(picks[:num_boxes])
        solved = Puzzle(w, height + 2, walls, goals, (picks[-1], goals))
        start = _reverse_play(rng, solved, steps=4 * (width + height) * num_boxes)
        if start[1] & goals:
            continue  # every box starts off the goals
        puzzle = Puzzle(w, height + 2, walls, goals, start)
        plan = solve(puzzle, start, GENERATE_NODES)
        if plan is not None and moves[0] <= len(plan) <= moves[1]:
            return puzzle, plan
    raise RuntimeError(
        f"no {width}x{height} puzzle with {num_boxes} boxes in {attempts} attempts; widen the move range"
    )
