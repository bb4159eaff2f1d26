"""Audit reward scorers before (or after) training on them.

    python -m scripts.audit_rewards --env Arithmetic-v0 --reward numeric,exact,format,rubric \
        --honeypots 400 --output audit.json
    python -m scripts.audit_rewards --env WordProblems-v0 --env-kwargs level=3 \
        --reward numeric,judge --judge-model Qwen/Qwen2.5-1.5B-Instruct --device cuda \
        --responses runs/my-run/transcripts.jsonl --output audit.json

Each scorer named in `--reward` (the trainer's syntax; weights are ignored here) scores
honeypots with known verdicts, exploit probes and, with `--responses`, real responses,
all shuffled together. Prints a markdown table (false-positive / false-negative rates with
95 % intervals, flagged probes, errors, pairwise agreement) and writes the full report as
JSON; `--logdir` also writes it as TensorBoard scalars. Honeypots are generated from the
env (`--honeypots N`) and/or read from `--honeypot-file` (JSONL rows: question, answer,
response, correct). `--responses` reads JSONL rows with question/answer/response, or a
run's transcripts.jsonl (the last step of each episode). How to read it: docs/rewards.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scripts.audit_rewards", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Arithmetic-v0", help="single-turn env id with info['answer']")
    p.add_argument("--env-kwargs", nargs="*", default=[], metavar="KEY VALUE",
                   help="gymnasium.make keywords, as for algos.train: KEY VALUE or KEY=VALUE pairs")
    p.add_argument("--reward", default="env,exact,numeric,format,rubric", help="scorers to audit (trainer syntax)")
    p.add_argument("--reward-tolerance", type=float, default=1e-6)
    p.add_argument("--reward-regex", default="")
    p.add_argument("--rubric", default="", help="rubric file; empty = the env's own")
    p.add_argument("--judge-model", default="")
    p.add_argument("--judge-prompt", default="")
    p.add_argument("--judge-mode", default="expected")
    p.add_argument("--judge-batch-size", type=int, default=32)
    p.add_argument("--device", default="cpu")
    p.add_argument("--honeypots", type=int, default=200, help="generated honeypots (half correct, half wrong)")
    p.add_argument("--honeypot-file", default="", help="JSONL honeypots: question, answer, response, correct")
    p.add_argument("--responses", default="", help="JSONL of real responses, or a run's transcripts.jsonl")
    p.add_argument("--threshold", type=float, default=0.5, help="a score >= this is a pass")
    p.add_argument("--probe-threshold", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default="reward_audit.json")
    p.add_argument("--logdir", default="", help="also write TensorBoard scalars here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    args = parse_args(argv)
    try:
        report = audit(args)
    except (ValueError, OSError) as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    from rewards.audit import markdown

    print(markdown(report))
    print(f"report: {args.output}", file=sys.stderr)
    return 0


def audit(args: argparse.Namespace) -> dict:

    import envs
    from algos.cli import key_value_pairs
    from algos.config import ConfigError, read_yaml_values
    from algos.validate import check_env_id
    from rewards.audit import audit_scalars, env_honeypots, jsonable, load_honeypots, load_responses, run_audit
    from rewards.layer import RewardConfig, build_scorer, parse_spec

    if args.honeypots < 0 or (args.honeypots < 2 and not args.honeypot_file):
        raise ValueError("--honeypots must be >= 2 (or give --honeypot-file)")
    try:
        check_env_id(args.env)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    kwargs = read_yaml_values(key_value_pairs(args.env_kwargs))
    opts = RewardConfig(reward=args.reward, reward_tolerance=args.reward_tolerance, reward_regex=args.reward_regex,
                        rubric=args.rubric, judge_model=args.judge_model, judge_prompt=args.judge_prompt,
                        judge_mode=args.judge_mode, judge_batch_size=args.judge_batch_size)  # fmt: skip
    env_rubric = envs.env_metadata(args.env).get("rubric")
    scorers = [build_scorer(name, opts, env_rubric, args.device) for name, _ in parse_spec(args.reward)]
    honeypots = env_honeypots(args.env, args.honeypots, args.seed, kwargs) if args.honeypots else []
    if args.honeypot_file:
        honeypots += load_honeypots(args.honeypot_file)
    real = load_responses(args.responses) if args.responses else []
    report = run_audit(scorers, honeypots, real, args.threshold, args.probe_threshold, seed=args.seed)
    report = {"env": args.env, "env_kwargs": kwargs, "reward": args.reward, **report}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(jsonable(report), indent=1))
    if args.logdir:
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(args.logdir) as tb:
            for tag, value in audit_scalars(report).items():
                if value == value:  # NaN (no data) is left out
                    tb.add_scalar(tag, value, 0)
    return report


if __name__ == "__main__":
    sys.exit(main())
