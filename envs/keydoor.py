"""KeyDoor: rooms on a grid, keys, locked doors and a treasure; the built-in multi-step env.

The agent starts in one room of a `width` x `height` grid and must take the treasure.
The treasure lies in a vault with a single doorway, locked. With `num_locks` = L the
locks form a chain: the vault is locked with key 0, key i lies in a closet (one doorway)
locked with key i + 1, and the last key lies somewhere in the open rooms. Open rooms are
joined to their grid neighbours except where `walls` (a fraction of the spare passages)
removed one; the open area always stays connected. Distractor items and keys that fit no
door cost steps and teach the agent to ignore them. The layout is drawn from the reset
seed: the G envs of a group share it, so the same (room, inventory, doors) states recur
across the group's rollouts, which is what GiGPO's anchor states need.

Commands: `go <direction>`, `take <item>`, `unlock <direction>` (with a fitting key in
hand). With `compass=True` the observation names the direction of the treasure and of
every lock key not yet carried, so a good next action is a function of what the agent
sees; without it the agent has to explore and remember.

Tools (`--action-format tool_call|json`): `metadata["tools"]` declares `go`, `take` and `unlock`
as JSON function schemas; a call becomes the command "<tool> <argument>" (agents/parser.py
`command_template`), so `{"name": "go", "arguments": {"direction": "north"}}` sends "go north".

Reward is 1 for taking the treasure (the episode then terminates, won) and 0 otherwise.
`expert_action` is the first action of a shortest plan (breadth-first search over
position, inventory and door states).
"""

from __future__ import annotations

from collections import deque

from envs.base import TextEnv

DIRS = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}
ROOM_NAMES = (
    "kitchen", "hall", "library", "cellar", "study", "pantry", "garden", "attic",
    "bedroom", "bathroom", "gallery", "workshop", "chapel", "armory", "nursery", "larder",
    "parlor", "office", "laundry", "cloakroom", "ballroom", "foyer", "scullery", "den",
    "observatory", "conservatory", "billiard room", "music room", "storeroom", "boiler room",
    "wine cellar", "sunroom", "dining room", "guest room", "tower", "crypt",
)  # fmt: skip
COLORS = ("red", "blue", "green", "yellow", "white", "black", "silver", "purple")
JUNK = ("old boot", "candle", "book", "rope", "apple", "spoon", "lamp", "feather", "cup", "coin")
TREASURE = "treasure"

Cell = tuple[int, int]
Edge = frozenset  # frozenset of two cells


def _direction(frm: Cell, to: Cell) -> str:
    dx, dy = to[0] - frm[0], to[1] - frm[1]
    ns = "north" if dy < 0 else "south" if dy > 0 else ""
    ew = "east" if dx > 0 else "west" if dx < 0 else ""
    return "-".join(p for p in (ns, ew) if p) or "here"


def _tool(name: str, description: str, arg: str, schema: dict) -> dict:
    parameters = {"type": "object", "properties": {arg: schema}, "required": [arg]}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


_DIRECTION = {"type": "string", "enum": list(DIRS), "description": "a compass direction"}
TOOLS = (
    _tool("go", "Walk through an open exit.", "direction", _DIRECTION),
    _tool("take", "Pick up an item in this room.", "item", {"type": "string", "description": "the item, e.g. red key"}),
    _tool("unlock", "Unlock the locked door in a direction with the key you carry.", "direction", _DIRECTION),
)


class KeyDoorEnv(TextEnv):
    """Find keys, unlock doors, take the treasure. See the module docstring."""

    metadata = {**TextEnv.metadata, "info_keys": ("state_key", "admissible_commands", "expert_action"),
                "tools": TOOLS}  # fmt: skip

    def __init__(
        self,
        width: int = 3,
        height: int = 3,
        num_locks: int = 1,
        num_distractors: int = 1,
        num_false_keys: int = 0,
        walls: float = 0.0,
        compass: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if width < 1 or height < 1 or width * height < num_locks + 1:
            raise ValueError(f"a {width}x{height} grid cannot hold {num_locks} locked rooms plus a start room")
        if num_locks < 1 or num_locks + num_false_keys > len(COLORS):
            raise ValueError(f"num_locks + num_false_keys must be in 1..{len(COLORS)}")
        if not 0 <= num_distractors <= len(JUNK):
            raise ValueError(f"num_distractors must be in 0..{len(JUNK)}")
        if not 0.0 <= walls <= 1.0:
            raise ValueError("walls is a fraction in [0, 1]")
        self.width, self.height = width, height
        self.num_locks, self.num_distractors = num_locks, num_distractors
        self.num_false_keys, self.walls, self.compass = num_false_keys, walls, compass

    # -- layout ----------------------------------------------------------------------
    def _reset_state(self) -> None:
        rng = self.np_random
        cells = [(x, y) for y in range(self.height) for x in range(self.width)]
        while True:  # rejection sampling; a few tries at most on sensible sizes
            order = rng.permutation(len(cells))
            closets = [cells[i] for i in order[: self.num_locks]]
            open_cells = [c for c in cells if c not in closets]
            doors = self._closet_doors(closets, open_cells, rng)
            if doors is not None and self._connected(open_cells, self._open_edges(open_cells)):
                break
        self.names = dict(zip(cells, (ROOM_NAMES[i] for i in rng.permutation(len(cells)))))
        self.edges = self._open_edges(open_cells)
        self._add_walls(open_cells, rng)
        # locks[edge] = color; the vault (closet 0) is locked with key 0, closet i with key i.
        self.locks = {doors[i]: COLORS[i] for i in range(self.num_locks)}
        self.edges |= set(doors)
        self.items: dict[Cell, list[str]] = {c: [] for c in cells}
        self.items[closets[0]].append(TREASURE)
        for i in range(1, self.num_locks):
            self.items[closets[i]].append(f"{COLORS[i - 1]} key")
        last_key = f"{COLORS[self.num_locks - 1]} key"
        spare = [f"{c} key" for c in COLORS[self.num_locks : self.num_locks + self.num_false_keys]]
        junk = [JUNK[i] for i in rng.permutation(len(JUNK))[: self.num_distractors]]
        for item in [last_key, *spare, *junk]:
            self.items[open_cells[rng.integers(len(open_cells))]].append(item)
        self.pos = open_cells[rng.integers(len(open_cells))]
        self.inventory: list[str] = []
        self.unlocked: set[Edge] = set()

    def _closet_doors(self, closets, open_cells, rng) -> list[Edge] | None:
        doors = []
        for c in closets:
            nbrs = [n for n in self._neighbours(c) if n in open_cells]
            if not nbrs:
                return None
            doors.append(Edge((c, nbrs[rng.integers(len(nbrs))])))
        return doors

    def _neighbours(self, c: Cell) -> list[Cell]:
        out = []
        for dx, dy in DIRS.values():
            n = (c[0] + dx, c[1] + dy)
            if 0 <= n[0] < self.width and 0 <= n[1] < self.height:
                out.append(n)
        return out

    def _open_edges(self, open_cells: list[Cell]) -> set[Edge]:
        cs = set(open_cells)
        return {Edge((c, n)) for c in cs for n in self._neighbours(c) if n in cs}

    @staticmethod
    def _connected(cells: list[Cell], edges: set[Edge]) -> bool:
        if not cells:
            return False
        seen, todo = {cells[0]}, [cells[0]]
        while todo:
            c = todo.pop()
            for e in edges:
                if c in e:
                    (n,) = e - {c}
                    if n not in seen:
                        seen.add(n)
                        todo.append(n)
        return len(seen) == len(cells)

    def _add_walls(self, open_cells: list[Cell], rng) -> None:
        """Remove a fraction of the passages that are not needed for connectivity."""
        candidates = sorted(self.edges, key=lambda e: sorted(e))
        n_walls = int(round(self.walls * max(0, len(candidates) - (len(open_cells) - 1))))
        for i in rng.permutation(len(candidates)):
            if n_walls == 0:
                break
            trial = self.edges - {candidates[i]}
            if self._connected(open_cells, trial):
                self.edges, n_walls = trial, n_walls - 1

    # -- dynamics --------------------------------------------------------------------
    def _exit(self, direction: str) -> tuple[Cell, Edge] | None:
        dx, dy = DIRS[direction]
        nxt = (self.pos[0] + dx, self.pos[1] + dy)
        edge = Edge((self.pos, nxt))
        return (nxt, edge) if edge in self.edges else None

    def _apply(self, command: str) -> tuple[str, float, bool]:
        verb, _, arg = command.partition(" ")
        if verb == "go" and arg in DIRS:
            ex = self._exit(arg)
            if ex is None:
                return "There is no way " + arg + ".", 0.0, False
            nxt, edge = ex
            if edge in self.locks and edge not in self.unlocked:
                return f"The {self.locks[edge]} door is locked.", 0.0, False
            self.pos = nxt
            return f"You go {arg}.", 0.0, True
        if verb == "take" and arg in self.items[self.pos]:
            self.items[self.pos].remove(arg)
            if arg == TREASURE:
                self._won = True
                return "You take the treasure. You win!", 1.0, True
            self.inventory.append(arg)
            return f"You take the {arg}.", 0.0, True
        if verb == "unlock" and arg in DIRS:
            ex = self._exit(arg)
            if ex is None or ex[1] not in self.locks or ex[1] in self.unlocked:
                return f"There is no locked door {arg}.", 0.0, False
            color = self.locks[ex[1]]
            if f"{color} key" not in self.inventory:
                return f"You have no key that fits the {color} door.", 0.0, False
            self.unlocked.add(ex[1])
            return f"You unlock the {color} door.", 0.0, True
        return "You can't do that.", 0.0, False

    # -- views -----------------------------------------------------------------------
    @property
    def task(self) -> str:
        return "Find the treasure and take it."

    def _describe(self) -> str:
        exits = []
        for d in DIRS:
            ex = self._exit(d)
            if ex is None:
                continue
            if ex[1] in self.locks:
                state = "open" if ex[1] in self.unlocked else "locked"
                exits.append(f"{d} ({self.locks[ex[1]]} door, {state})")
            else:
                exits.append(d)
        here = self.items[self.pos]
        parts = [
            f"You are in the {self.names[self.pos]}.",
            f"Exits: {', '.join(exits)}.",
            f"You see: {', '.join(here) if here else 'nothing'}.",
            f"You carry: {', '.join(self.inventory) if self.inventory else 'nothing'}.",
        ]
        if self.compass:
            parts.append(f"Compass: {'; '.join(self._compass())}.")
        return " ".join(parts)

    def _compass(self) -> list[str]:
        wanted = {TREASURE} | {f"{c} key" for c in COLORS[: self.num_locks]}
        marks = []
        for cell, items in self.items.items():
            for item in items:
                if item in wanted:
                    marks.append((item != TREASURE, item, _direction(self.pos, cell)))
        return [f"{item} {d}" for _, item, d in sorted(marks)]

    def _state_key(self) -> str:
        doors = ",".join(sorted(self.locks[e] for e in self.unlocked)) or "-"
        inv = ",".join(sorted(self.inventory)) or "-"
        return f"{self.names[self.pos]}|inv={inv}|open={doors}|won={int(self._won)}"

    def _admissible(self) -> list[str]:
        cmds = []
        for d in DIRS:
            ex = self._exit(d)
            if ex is None:
                continue
            locked = ex[1] in self.locks and ex[1] not in self.unlocked
            if not locked:
                cmds.append(f"go {d}")
            elif f"{self.locks[ex[1]]} key" in self.inventory:
                cmds.append(f"unlock {d}")
        cmds += [f"take {item}" for item in self.items[self.pos]]
        return cmds

    def _expert(self) -> str | None:
        """First action of a shortest plan: BFS over (position, keys held, doors open)."""
        keys = frozenset(i for i in self.inventory if i.endswith(" key"))
        start = (self.pos, keys, frozenset(self.unlocked))
        lying = {c: [i for i in its if i == TREASURE or i.endswith(" key")] for c, its in self.items.items()}
        first: dict = {start: None}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            pos, held, opened = state
            for action, nxt in self._successors(pos, held, opened, lying):
                if nxt == "won":
                    return first[state] or action
                if nxt not in first:
                    first[nxt] = first[state] or action
                    queue.append(nxt)
        return None

    def _successors(self, pos, held, opened, lying):
        for item in lying[pos]:
            if item == TREASURE:
                yield f"take {item}", "won"
            elif item not in held:
                yield f"take {item}", (pos, held | {item}, opened)
        for d, (dx, dy) in DIRS.items():
            nxt = (pos[0] + dx, pos[1] + dy)
            edge = Edge((pos, nxt))
            if edge not in self.edges:
                continue
            if edge in self.locks and edge not in opened:
                if f"{self.locks[edge]} key" in held:
                    yield f"unlock {d}", (pos, held, opened | {edge})
                continue
            yield f"go {d}", (nxt, held, opened)
