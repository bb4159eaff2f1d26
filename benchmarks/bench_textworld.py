"""TextWorld env latencies, and what env workers buy on a lockstep round.

    python -m benchmarks.bench_textworld [--games 6] [--steps 300]
    python -m benchmarks.bench_textworld workers [--envs 64] [--level 10] [--workers 0 1 2] [--train]

`latency` (the default) generates small pools into a fresh temporary cache (so generation is
really measured), then times the env on them, one family at a time, in one process. Prints
medians (ms).

`workers` runs the collector's lockstep rounds over `--envs` coin collector envs (groups of 4,
actions from a seeded script: the expert's half the time, else a random admissible command, so
every pool sees the same calls), once per `--workers` value, side by side in one process, and
prints env seconds per round, the ratio to in-process, and the IPC cost per call (a ping round
trip, and the extra per step over one worker). Every pool must give the same trajectories; the
run fails otherwise. `--train` adds one training iteration per worker count (the tiny model,
no warm-up, unless `--train-flags` says otherwise) and prints the env share of the iteration.
On a GPU machine: `... workers --workers 0 16 --train --train-flags --model M --backend vllm`. `--out FILE` writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    p.add_argument("part", nargs="?", default="latency", choices=("latency", "workers"))
    p.add_argument("--games", type=int, default=6, help="latency: games per family; workers: the training pool")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--level", type=int, default=10)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--collects", type=int, default=2, help="collects (one episode per env each) per pool")
    p.add_argument("--ray", type=int, default=0, help="also this many workers as Ray actors (needs ray)")
    p.add_argument("--train", action="store_true", help="also one training iteration per worker count")
    p.add_argument("--train-flags", nargs=argparse.REMAINDER, default=[],
                   help="the rest goes to algos.train (e.g. --model M --backend vllm --device cuda on a GPU)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.part == "workers":
        return workers_part(a)
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


class ScriptedTextWorld:
    """The expert's command half the time, else a random admissible one, from a seeded stream; keeps a
    stopwatch so the collector times its env calls on it, as it does on the trainer's agent."""

    def __init__(self, seed: int) -> None:
        from agents.stopwatch import Stopwatch

        self.rng, self.stopwatch, self.rounds = random.Random(seed), Stopwatch(), 0

    def act(self, views):
        from agents.agent import Act

        self.rounds += 1
        out = []
        for v in views:
            cmd = v.expert if v.expert and self.rng.random() < 0.5 else self.rng.choice(v.admissible or ["look"])
            out.append(Act(cmd, "ok", cmd, [1], [2], [0.0]))
        return out


def pool_rounds(workers: int, a, backend: str = "process") -> dict:
    """Env seconds per lockstep round for one worker count, and the IPC round trip of a ping."""
    from algos.collector import Collector
    from envs.workers import WorkerConfig

    kwargs = {"level": a.level, "num_games": a.games, "num_held_out": 0}
    cfg = WorkerConfig(env_workers=workers, env_backend=backend)
    collector = Collector("TextWorld-CoinCollector-v0", a.envs // 4, 4, kwargs, cfg)
    try:
        env_s, rounds, calls, trajectories = 0.0, 0, 0, []
        for c in range(a.collects):
            agent = ScriptedTextWorld(c)
            trajs = collector.collect(agent, [(c * a.envs // 4 + g) % a.games for g in range(a.envs // 4)])
            env_s += agent.stopwatch.lap()["env"]
            rounds += agent.rounds + 1  # the steps' rounds and the reset round
            calls += sum(len(t.steps) for t in trajs) + len(trajs)
            trajectories += [[(s.observation, s.action, s.reward, s.won, s.env_error) for s in t.steps] for t in trajs]
        pings = []
        for _ in range(20):
            start = time.perf_counter()
            collector.pool.run([(i, "ping", None) for i in range(a.envs)])
            pings.append((time.perf_counter() - start) / a.envs)
    finally:
        collector.close()
    return {"workers": workers, "backend": backend if workers else "in-process", "env_s": env_s, "rounds": rounds, "calls": calls, "env_s_per_round": env_s / rounds,
            "ping_us_per_call": 1e6 * statistics.median(pings), "trajectories": trajectories}  # fmt: skip


def train_share(workers: int, a) -> dict:
    """One training iteration (tiny model, no warm-up) with `workers` env workers: its env share."""
    out = Path(tempfile.mkdtemp(prefix="textrl-bench-workers-"))
    cmd = [sys.executable, "-m", "algos.train", "--env", "TextWorld-CoinCollector-v0", "--env-kwargs", "level",
           str(a.level), "num_games", str(a.games), "num_held_out", "4", "--num-groups", str(a.envs // 4),
           "--group-size", "4", "--iterations", "1", "--sft-steps", "0", "--eval-episodes", "0",
           "--max-extra-groups", "0", "--env-workers", str(workers), "--output-dir", str(out / "run"), *a.train_flags]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    row = next(r for r in map(json.loads, (out / "run" / "metrics.jsonl").read_text().splitlines()) if "time/env_s" in r)
    return {"workers": workers, "env_s": row["time/env_s"], "iteration_s": row["time/iteration_s"],
            "env_share": row["time/env_s"] / row["time/iteration_s"], "steps": row.get("rollout/steps")}  # fmt: skip


def workers_part(a) -> int:
    print(f"TextWorld-CoinCollector-v0 level {a.level}, {a.envs} envs, {a.collects} collects per pool, "
          f"{os.cpu_count()} cores", flush=True)  # fmt: skip
    rows = [pool_rounds(w, a) for w in a.workers] + ([pool_rounds(a.ray, a, "ray")] if a.ray else [])
    base = rows[0]
    same = all(r["trajectories"] == base["trajectories"] for r in rows)
    one = next((r for r in rows if r["workers"] == 1 and r["backend"] == "process"), None)
    print(f"{'pool':>12s} {'workers':>7s} {'rounds':>6s} {'env s':>7s} {'s/round':>8s} {'x base':>7s} {'ping us/call':>12s}")
    for r in rows:
        r["ratio"] = r["env_s_per_round"] / base["env_s_per_round"]
        print(f"{r['backend']:>12s} {r['workers']:7d} {r['rounds']:6d} {r['env_s']:7.2f} {r['env_s_per_round']:8.4f} "
              f"{r['ratio']:7.2f} {r['ping_us_per_call']:12.0f}")  # fmt: skip
    result = {"level": a.level, "envs": a.envs, "cores": os.cpu_count(), "same_trajectories": same,
              "pools": [{k: v for k, v in r.items() if k != "trajectories"} for r in rows]}  # fmt: skip
    if one is not None and base["workers"] == 0:
        extra = (one["env_s"] - base["env_s"]) / base["calls"]
        result["ipc_us_per_step_call"] = 1e6 * extra
        print(f"1 worker minus in-process, per call (TextWorld payloads; within noise if near 0): {1e6 * extra:.0f} us")
    print(f"same trajectories in every pool: {'yes' if same else 'NO'}")
    if a.train:
        result["train"] = [train_share(w, a) for w in a.workers if w != 1]
        for t in result["train"]:
            print(f"training iteration, {t['workers']} workers: env {t['env_s']:.1f} s of {t['iteration_s']:.1f} s "
                  f"({t['env_share']:.1%})", flush=True)  # fmt: skip
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
