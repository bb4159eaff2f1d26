"""TextWorld games: families generated offline with TextWorld's own generator, and a cache.

A family (coin collector, treasure hunter, cooking, simple) at a difficulty level is a
pool of games: game i of the training split is generated with TextWorld seed i, game i
of the held-out split with seed HELD_OUT_GAME_SEED + i (and, where the family has one,
TextWorld's own held-out content split: unseen foods for cooking, test games for simple).
Each game is generated once into

    <cache>/textworld-<version>/<family>/level<L>/<split>-<seed>/game.z8 (+ game.json)

where <cache> is `$TEXTRL_CACHE` or ~/.cache/textrl. A game is built in a temporary
folder and renamed into place, so concurrent runs never see half a game: the first
rename wins and the loser's identical copy is discarded. `ensure_games` fills a whole
pool in bulk, in parallel, with a progress bar; the envs call it when they are made, so
a training iteration never waits for a game.

    python -m envs.tw_games coin --level 5 --games 200 --held-out 50   # pre-build a pool

Game files from elsewhere (a `games_dir`, e.g. ALFWorld's) are listed and checked by
`find_games` and `check_game_file`: a corrupt Z-machine file would abort the whole
process inside the interpreter, so its header and checksum are verified before loading.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from envs.base import StorageError, cache_dir, check_cache

HELD_OUT_GAME_SEED = 1_000_000  # TextWorld seeds of held-out games never meet training ones
GAME_EXTS = (".z8", ".z5", ".tw-pddl")


class GameError(ValueError):
    """A user-facing problem with game files or family settings (one line)."""


def _cooking(level: int, held_out: bool) -> dict:
    #        recipe, take, go, open, cut, cook, drop
    table = {
        1: (1, 1, 1, False, False, False, False),
        2: (1, 1, 1, True, False, False, False),
        3: (2, 2, 1, True, True, False, False),
        4: (2, 2, 6, True, True, False, False),
        5: (3, 3, 6, True, True, True, False),
        6: (3, 3, 9, True, True, True, False),
        7: (4, 4, 9, True, True, True, True),
        8: (5, 5, 12, True, True, True, True),
    }
    recipe, take, go, open_, cut, cook, drop = table[level]
    return dict(recipe=recipe, take=take, go=go, open=open_, cut=cut, cook=cook, drop=drop,
                split="valid" if held_out else "train")  # fmt: skip


def _simple(level: int, held_out: bool) -> dict:
    rewards, goal = {1: ("dense", "detailed"), 2: ("balanced", "detailed"), 3: ("sparse", "brief")}[level]
    return dict(rewards=rewards, goal=goal, test=held_out)


@dataclass(frozen=True)
class Family:
    challenge: str  # TextWorld's challenge name
    levels: range
    settings: Callable[[int, bool], dict]  # (level, held_out) -> challenge settings
    doc: str


FAMILIES = {
    "coin": Family(
        "tw-coin_collector",
        range(1, 301),
        lambda level, held_out: {"level": level},
        "find the coin; level L: quest length (L-1)%100+1, distractor rooms from level 101",
    ),
    "treasure": Family(
        "tw-treasure_hunter",
        range(1, 31),
        lambda level, held_out: {"level": level},
        "take the named object, not the wrong one; 5/10/20 rooms, doors and locks from level 11/21",
    ),
    "cooking": Family(
        "tw-cooking",
        range(1, 9),
        _cooking,
        "read the cookbook, gather, cut, cook, prepare and eat the meal; held-out games use unseen foods",
    ),
    "simple": Family(
        "tw-simple",
        range(1, 4),
        _simple,
        "the fixed-layout house game; levels 1-3: dense, balanced, sparse rewards",
    ),
}


def check_level(family: str, level: int) -> Family:
    if family not in FAMILIES:
        raise GameError(f"unknown TextWorld family {family!r}; choose one of: {', '.join(FAMILIES)}")
    fam = FAMILIES[family]
    if not isinstance(level, int) or level not in fam.levels:
        raise GameError(
            f"{family} level must be an integer in {fam.levels.start}..{fam.levels.stop - 1} (got {level!r})"
        )
    return fam


def games_root() -> Path:
    import textworld

    return cache_dir() / f"textworld-{textworld.__version__}"


def game_path(family: str, level: int, seed: int, held_out: bool = False) -> Path:
    split = "heldout" if held_out else "train"
    return games_root() / family / f"level{level}" / f"{split}-{seed}" / "game.z8"


def pool_seeds(n: int, held_out: bool) -> list[int]:
    base = HELD_OUT_GAME_SEED if held_out else 0
    return [base + i for i in range(n)]


def generate_game(family: str, level: int, seed: int, held_out: bool = False) -> Path:
    """Generate one game into the cache (atomically) unless it is there; return its path."""
    import textworld
    from textworld.challenges import CHALLENGES
    from textworld.generator.game import GameOptions

    fam = check_level(family, level)
    final = game_path(family, level, seed, held_out)
    if final.exists():
        return final
    final.parent.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent.parent, prefix=f".{final.parent.name}-"))
    try:
        settings = fam.settings(level, held_out)
        if family == "cooking":
            settings["recipe_seed"] = seed
        options = GameOptions()
        options.seeds = seed
        options.path = str(tmp / "game.z8")
        options.file_ext = ".z8"
        options.force_recompile = True
        with warnings.catch_warnings():  # the interpreter's "not fully supported" while checking the walkthrough
            warnings.simplefilter("ignore")
            game = CHALLENGES[fam.challenge][1](settings, options)
            textworld.generator.compile_game(game, options)
        for extra in tmp.glob("*.ni"):  # Inform 7 source, not needed to play
            extra.unlink()
        os.replace(tmp, final.parent)
    except OSError:
        if not final.exists():
            raise
        # another process renamed its identical copy into place first
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _generate(args: tuple[str, int, int, bool]) -> str:
    return str(generate_game(*args))


def ensure_games(
    family: str,
    level: int,
    seeds: list[int],
    held_out: bool = False,
    workers: int | None = None,
    progress: bool = True,
) -> list[Path]:
    """All games of a pool, generating the missing ones in bulk (parallel, progress bar)."""
    check_level(family, level)
    missing = [s for s in seeds if not os.path.exists(game_path(family, level, s, held_out))]  # never raises
    if missing:
        from tqdm import tqdm

        check_cache(games_root())  # one line (a name too long too) before generating, not a traceback from a game
        jobs = [(family, level, s, held_out) for s in missing]
        workers = workers or min(os.cpu_count() or 1, max(1, len(missing) // 8))
        desc = f"generating {family} level {level} {'held-out' if held_out else 'train'} games"
        bar = tqdm(total=len(jobs), desc=desc, disable=not progress, file=sys.stderr, dynamic_ncols=True)
        if workers <= 1:
            for job in jobs:
                _generate(job)
                bar.update()
        else:
            with ProcessPoolExecutor(workers) as pool:
                for _ in pool.map(_generate, jobs):
                    bar.update()
        bar.close()
    return [game_path(family, level, s, held_out) for s in seeds]


# -- game files from elsewhere --------------------------------------------------------
def find_games(source: str | os.PathLike | list) -> list[Path]:
    """Game files of a folder (searched recursively) or of an explicit list, sorted."""
    if isinstance(source, (list, tuple)):
        paths = [Path(os.path.expanduser(str(p))) for p in source]
        for p in paths:
            if not p.is_file():
                raise GameError(f"game file {str(p)!r} not found")
    else:
        root = Path(os.path.expanduser(str(source)))
        if not root.is_dir():
            raise GameError(f"games_dir {str(root)!r} is not a folder")
        paths = sorted(p for p in root.rglob("*") if p.suffix in GAME_EXTS or p.suffix == ".ulx")
        if not paths:
            raise GameError(f"no TextWorld games (*.z8, *.z5, *.tw-pddl) under {str(root)!r}")
    for p in paths:
        check_game_file(p)
    return sorted(paths)


def check_game_file(path: Path) -> None:
    """Raise GameError unless `path` is a playable TextWorld game with its metadata."""
    if path.suffix == ".ulx":
        raise GameError(f"{path}: Glulx (.ulx) games need textworld < 1.7; regenerate them as .z8")
    if path.suffix not in GAME_EXTS:
        raise GameError(f"{path}: not a TextWorld game (expected one of {', '.join(GAME_EXTS)})")
    if path.suffix == ".tw-pddl":  # JSON for TextWorld's PDDL engine (ALFWorld's format)
        try:
            data = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise GameError(f"{path}: not valid JSON ({e})") from None
        missing = [k for k in ("pddl_domain", "pddl_problem", "grammar") if k not in data]
        if missing:
            raise GameError(f"{path}: missing {', '.join(missing)} (not a TextWorld PDDL game)")
        return
    if not path.with_suffix(".json").is_file():
        raise GameError(
            f"{path}: missing {path.with_suffix('.json').name} (TextWorld's game metadata, needed for state keys)"
        )
    problem = zmachine_problem(path.read_bytes())
    if problem:
        raise GameError(f"{path}: corrupt Z-machine file ({problem})")


def zmachine_problem(data: bytes) -> str | None:
    """What is wrong with a Z-machine story file, or None. The interpreter aborts the whole
    process on a bad file, so the header and checksum are checked first."""
    if len(data) < 64:
        return "shorter than its 64-byte header"
    version = data[0]
    if version not in range(1, 9):
        return f"unknown version byte {version}"
    scale = 2 if version <= 3 else 4 if version <= 5 else 8
    length = int.from_bytes(data[0x1A:0x1C], "big") * scale
    if length > len(data) or length < 64:
        return f"header length {length} does not fit the file size {len(data)}"
    checksum = int.from_bytes(data[0x1C:0x1E], "big")
    if sum(data[0x40:length]) % 65536 != checksum:
        return "checksum mismatch"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m envs.tw_games", description="Pre-build a pool of TextWorld games.")
    p.add_argument("family", help=f"one of: {', '.join(FAMILIES)}")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--games", type=int, default=100, help="training games (TextWorld seeds 0..N-1)")
    p.add_argument("--held-out", type=int, default=20, help="held-out games")
    p.add_argument("--workers", type=int, default=None)
    a = p.parse_args(argv)
    try:
        ensure_games(a.family, a.level, pool_seeds(a.games, False), False, a.workers)
        paths = ensure_games(a.family, a.level, pool_seeds(a.held_out, True), True, a.workers)
    except (GameError, StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    root = paths[0].parent.parent if paths else games_root()
    print(f"{a.games} training + {a.held_out} held-out games in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
