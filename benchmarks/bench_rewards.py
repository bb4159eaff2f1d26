"""Learning curves on a single-turn env under different reward sources, side by side.

    python -m benchmarks.bench_rewards [--env Arithmetic-v0] [--iterations 150] [--seeds 0 1 2]
        [--variants numeric rubric judge]

Every variant trains the same tiny model from the same warm-up seed with the same
hyperparameters (`configs/arithmetic.yaml`), only `--reward` differs; held-out success
(`eval/success_rate`, the env's exact-answer verdict, 200 problems) is measured every
`--eval-every` iterations. Each variant also scores with the other sources at weight 0,
so the scorer audit (reward_audit.json) compares them on the same responses. Prints the
mean +- std over seeds at each evaluation and writes the table to --out/summary.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

VARIANTS = {
    "numeric": ["--reward", "numeric,rubric=0"],
    "rubric": ["--reward", "rubric,numeric=0"],
    "numeric+format": ["--reward", "numeric=1,format=0.2"],
    "judge": ["--reward", "judge,numeric=0", "--judge-model", "tiny"],  # an untrained judge: what it teaches
}


def curve(run: Path) -> dict[int, float]:
    from algos.run_dir import read_metrics

    rows = read_metrics(run)
    return {r["iteration"]: r["eval/success_rate"] for r in rows if r.get("eval/success_rate") is not None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_rewards", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Arithmetic-v0")
    p.add_argument("--iterations", type=int, default=150)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", default=["numeric", "rubric", "judge"], choices=list(VARIANTS))
    p.add_argument("--out", default="runs/bench_rewards")
    args = p.parse_args(argv)
    out = Path(args.out)
    results: dict[str, dict[int, list[float]]] = {}
    for name in args.variants:
        for seed in args.seeds:
            run = out / f"{name}-s{seed}"
            if not (run / "metrics.jsonl").exists() or args.iterations not in curve(run):
                cmd = [sys.executable, "-m", "algos.train", "--config", "configs/arithmetic.yaml", "--env", args.env,
                       "--iterations", str(args.iterations), "--eval-every", str(args.eval_every),
                       "--seed", str(seed), "--output-dir", str(run), "--overwrite", *VARIANTS[name]]  # fmt: skip
                print("$", " ".join(cmd[1:]), file=sys.stderr)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for it, success in curve(run).items():
                results.setdefault(name, {}).setdefault(it, []).append(success)
    iters = sorted({it for r in results.values() for it in r})
    print("| reward | " + " | ".join(f"iter {it}" for it in iters) + " |")
    print("|---|" + "---|" * len(iters))
    for name, by_it in results.items():
        cells = [f"{np.mean(by_it[it]):.1%} ± {np.std(by_it[it]):.1%}" if it in by_it else "" for it in iters]
        print(f"| {name} | " + " | ".join(cells) + " |")
    (out / "summary.json").write_text(json.dumps({"env": args.env, "seeds": args.seeds, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
