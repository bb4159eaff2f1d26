"""The chat context against the window context: what the learner reads, and what an iteration costs.

    python -m benchmarks.bench_context [--envs keydoor coin5] [--iterations 3] [--out runs/bench_context]

For each env, three variants of the same job, only the context differing: `--context window
--memory 1` (the default), `--memory 3`, and `--context chat`. Every run is a fresh
`python -m algos.train` with the env's preset, its own SFT warm-up (a chat run warms up on
conversations), no held-out evaluation, then `--iterations` RL iterations, one after another on
this machine (so their times compare). Per variant, averaged over the RL iterations:

- read per trained: `train/forward_tokens / train/backward_tokens`, the tokens the learner runs
  through the model (prompt + response of every sample, every epoch, before shared prompts are run
  once) per token it trains on. A window sample re-reads its prompt (system, memory window,
  observation) for every reply; an episode reads each turn once.
- learner tokens per episode: `train/forward_tokens / ppo_epochs / episodes trained on`, episodes
  trained on = `train/backward_tokens / ppo_epochs / rollout/response_tokens / rollout/episode_length`
  (the kept episodes, from the trained replies).
- prompt tokens per step (`rollout/prompt_tokens`): what generation reads per step.
- iteration, generate and train seconds (`time/`).

A run whose metrics.jsonl reaches the last iteration is kept and not run again, so an interrupted
benchmark resumes where it stopped. Writes <out>/summary.json (the runs of earlier calls kept, this
call's replacing theirs) and prints the table (Markdown).
Left out: held-out success after the same env-step budget (a learning comparison, several seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
ENVS = {  # env preset flags: the default job, and TextWorld coin collector level 5
    "keydoor": ["--config", "configs/default.yaml"],
    "coin5": ["--config", "configs/textworld_coin.yaml", "--env-kwargs", "level", "5", "num_games", "32",
              "num_held_out", "32"],  # fmt: skip
}
VARIANTS = {
    "window-m1": ["--context", "window", "--memory", "1"],
    "window-m3": ["--context", "window", "--memory", "3"],
    "chat": ["--context", "chat"],
}


def run(env: str, variant: str, iterations: int, out: Path) -> list[dict]:
    run_dir = out / f"{env}-{variant}"
    metrics = run_dir / "metrics.jsonl"

    def rows() -> list[dict]:
        return [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []

    if not any(r.get("iteration") == iterations and "train/forward_tokens" in r for r in rows()):
        cmd = [sys.executable, "-m", "algos.train", *ENVS[env], *VARIANTS[variant], "--iterations", str(iterations),
               "--eval-episodes", "0", "--output-dir", str(run_dir), "--overwrite"]  # fmt: skip
        print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
        with open(out / f"{env}-{variant}.log", "w") as log:
            subprocess.run(cmd, cwd=REPO, check=True, stdout=log, stderr=log, env=os.environ.copy())
    return [r for r in rows() if "train/forward_tokens" in r]


def summarize(rows: list[dict], epochs: int) -> dict[str, float]:
    def mean(key):
        return sum(r[key] for r in rows) / len(rows)

    episodes = [r["train/backward_tokens"] / epochs / r["rollout/response_tokens"] / r["rollout/episode_length"]
                for r in rows]  # fmt: skip
    return {
        "read_per_trained": mean("train/forward_tokens") / mean("train/backward_tokens"),
        "learner_tokens_per_episode": sum(r["train/forward_tokens"] / epochs / e for r, e in zip(rows, episodes))
        / len(rows),
        "prompt_tokens_per_step": mean("rollout/prompt_tokens"),
        "episode_length": mean("rollout/episode_length"),
        "iteration_s": mean("time/iteration_s"),
        "generate_s": mean("time/generate_s"),
        "train_s": mean("time/train_s"),
        "iterations": len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_context", description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("runs/bench_context"))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "summary.json"  # the runs of earlier calls stay in it; this call's replace theirs
    summary: dict[str, dict[str, dict[str, float]]] = json.loads(path.read_text()) if path.is_file() else {}
    print("| env | context | read per trained token | learner tokens per episode | prompt tokens per step | "
          "episode length | iteration s | generate s | train s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for env in args.envs:
        for variant in args.variants:
            rows = run(env, variant, args.iterations, args.out)
            config = yaml.safe_load((args.out / f"{env}-{variant}" / "config.yaml").read_text())
            if not rows:
                print(f"| {env} | {variant} | no update ran | | | | | | |", flush=True)
                continue
            s = summarize(rows, int(config["ppo_epochs"]))
            summary.setdefault(env, {})[variant] = s
            print(f"| {env} | {variant} | {s['read_per_trained']:.1f} | {s['learner_tokens_per_episode']:,.0f} | "
                  f"{s['prompt_tokens_per_step']:.0f} | {s['episode_length']:.1f} | {s['iteration_s']:.1f} | "
                  f"{s['generate_s']:.1f} | {s['train_s']:.1f} |", flush=True)  # fmt: skip
            path.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
