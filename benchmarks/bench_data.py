"""The data layer at a fixed env-step budget: uniform tasks vs the task sampler, dynamic
sampling and adaptive group sizes, side by side from one warmed-up model.

    python -m benchmarks.bench_data [--env KeyDoor-v0] [--max-env-steps 12000] [--task-pool 128]

One SFT warm-up is saved once; every variant then starts RL from it with the same seed,
task pool, hyperparameters and env-step budget (`--max-env-steps`: a run stops once it has
collected that many env steps, dropped groups included), and is evaluated on the same
held-out episodes. Prints one row per variant: the fraction of groups with all-equal
returns before filtering (the rollouts uniform sampling wastes), informative groups
collected in the budget, extra rollouts, iterations the budget bought, held-out success. Runs go to
--out (default runs/bench_data).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

VARIANTS = {
    "uniform": ["--task-sampler", "uniform", "--no-dynamic-sampling"],
    "sampler": ["--task-sampler", "band", "--no-dynamic-sampling"],
    "sampler+dynamic": ["--task-sampler", "band", "--dynamic-sampling"],
    "sampler+dynamic+adaptive-G": ["--task-sampler", "band", "--dynamic-sampling", "--adaptive-group-size"],
}


def warm_up(env: str, out: Path, seed: int, sft_steps: int, flags: Sequence[str] = ()) -> Path:
    """One RL-free run's warm-up, saved as a checkpoint that every variant starts from. `flags`: more
    `algos.train` flags that shape it (`--config FILE`, `--env-kwargs level 7`, ...); the arguments win."""
    ckpt = out / "warm"
    if (ckpt / "config.json").exists():
        return ckpt
    import torch

    from algos import distributed
    from algos.cli import parse_config
    from algos.policy import build_policy
    from algos.resolve import resolve
    from algos.run_dir import TRAINER_STATE
    from algos.sft import warm_up_from_config

    cfg = parse_config([*flags, "--env", env, "--seed", str(seed), "--sft-steps", str(sft_steps), "--device", "cpu"])
    cfg = resolve(cfg, distributed.SINGLE, "cpu")
    model, tokenizer, agent = build_policy(cfg, device="cpu")
    warm_up_from_config(cfg, agent, model, len(tokenizer))  # the trainer's own warm-up
    ckpt.mkdir(parents=True)
    model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    torch.save({"iteration": 0, "config": {"env": env}}, ckpt / TRAINER_STATE)  # marks it warmed up
    return ckpt


def summarize(run: Path) -> dict:
    from algos.run_dir import read_metrics

    rows = read_metrics(run)
    it = [r for r in rows if "rollout/frac_zero_std_groups" in r]
    evals = [r for r in rows if "eval/success_rate" in r]
    informative = [r["data/groups_collected"] * (1 - r["rollout/frac_zero_std_groups"]) for r in it]
    return {
        "iterations": len(it),
        "env_steps": it[-1]["data/env_steps_total"] if it else 0,
        "zero_std_before": sum(r["rollout/frac_zero_std_groups"] for r in it) / max(len(it), 1),
        "informative_groups": sum(informative),
        "extra_rollouts": sum(r.get("data/extra_rollouts", 0) for r in it),
        "success_warm": evals[0]["eval/success_rate"] if evals else float("nan"),
        "success_final": evals[-1]["eval/success_rate"] if evals else float("nan"),
        "rollout_success_last3": sum(r["rollout/success_rate"] for r in it[-3:]) / max(len(it[-3:]), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_data", description=__doc__.splitlines()[0])
    p.add_argument("--env", default="KeyDoor-v0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sft-steps", type=int, default=90)
    p.add_argument("--max-env-steps", type=int, default=12000)
    p.add_argument("--task-pool", type=int, default=128)
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--out", default="runs/bench_data")
    a = p.parse_args(argv)
    out = Path(a.out)
    ckpt = warm_up(a.env, out, a.seed, a.sft_steps)
    results = {}
    for name in a.variants:
        run = out / name.replace("+", "_")
        if not (run / "checkpoints").exists():
            cmd = [sys.executable, "-m", "algos.train", "--env", a.env, "--model", str(ckpt), "--sft-steps", "0",
                   "--seed", str(a.seed), "--iterations", "1000", "--max-env-steps", str(a.max_env_steps),
                   "--task-pool", str(a.task_pool), "--eval-episodes", str(a.eval_episodes), "--eval-every", "0",
                   "--device", "cpu", "--output-dir", str(run), "--overwrite", *VARIANTS[name]]  # fmt: skip
            print(f"[{name}] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            subprocess.run(cmd, check=True)
        results[name] = summarize(run)
    print(f"\n{a.env}, budget {a.max_env_steps} env steps, task pool {a.task_pool}, seed {a.seed}")
    head = f"{'variant':28s} {'iters':>5s} {'env steps':>9s} {'zero-std groups':>15s} {'informative groups':>18s}"
    print(head + f" {'extra rollouts':>14s} {'held-out warm':>13s} {'held-out final':>14s}")
    for name, r in results.items():
        print(f"{name:28s} {r['iterations']:5d} {r['env_steps']:9.0f} {r['zero_std_before']:15.1%} "
              f"{r['informative_groups']:18.0f} {r['extra_rollouts']:14.0f} {r['success_warm']:13.1%} "
              f"{r['success_final']:14.1%}")  # fmt: skip
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
