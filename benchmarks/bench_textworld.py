"""TextWorld env latencies: game generation per game, reset (new game / same game), step.

    python -m benchmarks.bench_textworld [--games 6] [--steps 300]

Generates small pools into a fresh temporary cache (so generation is really measured),
then times the env on them, one family at a time, in one process. Prints medians (ms).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

CASES = [  # (env id, level)
    ("TextWorld-CoinCollector-v0", 5),
    ("TextWorld-TreasureHunter-v0", 15),
    ("TextWorld-Cooking-v0", 3),
    ("TextWorld-Simple-v0", 1),
]


def ms(xs: list[float]) -> str:
    return f"{1000 * statistics.median(xs):8.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_textworld", description=__doc__.splitlines()[0])
    p.add_argument("--games", type=int, default=6)
    p.add_argument("--steps", type=int, default=300)
    a = p.parse_args(argv)
    os.environ["TEXTRL_CACHE"] = tempfile.mkdtemp(prefix="textrl-bench-")
    import gymnasium as gym

    import envs  # noqa: F401
    from envs.tw_games import generate_game

    generate_game("coin", 1, 10_000)  # warm-up: imports and TextWorld's knowledge base load once per process
    print(f"{'env (level)':36s} {'generate':>8s} {'reset new':>9s} {'reset same':>10s} {'step':>8s}  (median ms)")
    for env_id, level in CASES:
        family = envs.TEXTWORLD_IDS[env_id][0]["family"]
        gen = []
        for seed in range(a.games):
            t = time.perf_counter()
            generate_game(family, level, seed)
            gen.append(time.perf_counter() - t)
        env = gym.make(env_id, level=level, num_games=a.games, num_held_out=0)
        new, same, step = [], [], []
        rng = random.Random(0)
        for i in range(2 * a.games):
            t = time.perf_counter()
            env.reset(seed=i % a.games)  # a different game from the last one: load + reset
            new.append(time.perf_counter() - t)
            t = time.perf_counter()
            obs, info = env.reset(seed=i % a.games)  # the same game again: reset only
            same.append(time.perf_counter() - t)
        obs, info = env.reset(seed=0)
        while len(step) < a.steps:
            cmd = (
                info["expert_action"]
                if rng.random() < 0.5 and info["expert_action"]
                else rng.choice(info["admissible_commands"])
            )
            t = time.perf_counter()
            obs, r, term, trunc, info = env.step(cmd)
            step.append(time.perf_counter() - t)
            if term or trunc:
                obs, info = env.reset(seed=rng.randrange(a.games))
        env.close()
        print(f"{env_id + f' ({level})':36s} {ms(gen)} {ms(new)}  {ms(same)} {ms(step)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
