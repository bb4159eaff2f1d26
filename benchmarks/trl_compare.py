"""Completions per second of our trainer vs TRL's GRPOTrainer on one identical single-turn workload (CPU),
over equal, recorded work.

    python -m benchmarks.trl_compare [--model tiny|smollm2-135m-instruct] [--steps 6] [--side both|ours|trl]
                                     # needs `pip install -e .[bench]`

The start: our SFT warm-up on the workload's env (`sft_steps` steps; the preset per model below), saved
once. Its checkpoint solves some of the problems, so rewards vary within groups and both trainers
update on every step; a model that solves none would give every group zero variance, and our
trainer would skip the update that TRL still runs on zero advantages (unequal work).

Both sides load that checkpoint fresh (float32, CPU) and train it with GRPO for 1 + steps optimizer
steps; the first step (warm-up of caches and allocators) is not timed, nor is loading. One step:
8 prompts x 8 completions = 64 completions sampled at temperature 1 (no top-k/top-p/min-p/repetition
filtering, at most 16 new tokens), rewarded, one PPO-clip update on all 64 at once (loss dapo, beta 0,
epsilon 0.2 / 0.28, max_grad_norm 1, constant lr). The prompts are the same, in the same order: the
env resets at the seeds our uniform task sampler draws, made into chat messages exactly as our agent
makes them; TRL gets them as a conversational "prompt" column and applies the same chat template, and
its token ids are checked against `LLMAgent.prompt_ids`. The reward is ours on both sides:
`--reward numeric` of the parsed <action> (no invalid-action penalty, which TRL has no counterpart of).

The work each side did is recorded per timed step: completions, generated tokens (EOS included),
response tokens that went through a forward and backward pass, optimizer steps. Ours comes from its
metrics.jsonl (`rollout/`, `train/backward_tokens`, `train/optimizer_steps`), TRL's from its own
generate and loss calls and its optimizer-step callback. No ratio is printed unless completions and
optimizer steps are equal step for step and the token totals agree within `--tolerance` (the sides
sample different tokens from the same policy, so lengths differ a little).

Step time: ours is `time/wall_s` of metrics.jsonl (everything since the previous iteration's log);
TRL's the time between consecutive `on_step_end` callbacks. Both include that step's logging.
`run_ours` and `run_trl` are importable (benchmarks/bench_speed.py calls them). Deliberately left
out: GPUs, vLLM, multi-turn envs, and any comparison of what the runs learn.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class Workload:
    env: str = "Arithmetic-v0"
    env_kwargs: dict = field(default_factory=lambda: {"level": 1})
    prompts_per_step: int = 8
    group_size: int = 8  # TRL: num_generations
    max_new_tokens: int = 16
    temperature: float = 1.0
    loss_type: str = "dapo"
    lr: float = 1.5e-4
    steps: int = 6
    """Timed optimizer steps; one untimed step runs first."""
    seed: int = 0
    model: str = "tiny"
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    max_grad_norm: float = 1.0
    sft_steps: int = 60
    """Our SFT warm-up of `model` on the env before either side starts (`warm_start`); 0: `model` as it is."""
    sft_batch_size: int = 64
    sft_lr: float = 1e-3
    start: str = ""
    """The checkpoint both sides load (the warm-up's, set by `warm_start`); empty: `model`."""

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def path(self) -> str:
        return self.start or self.model


WORKLOADS = {
    "tiny": Workload(),  # 60 SFT steps: about 10 % of level-1 problems solved, so groups' rewards vary
    # a pretrained model: a short warm-up at a small lr (configs/smollm2-135m.yaml), fewer timed steps. After that
    # warm-up it solves 99 % of level 1 (most groups all right, our updates skipped), 68 % of level 3 (products, two steps)
    "smollm2-135m-instruct": Workload(
        model="smollm2-135m-instruct", env_kwargs={"level": 3}, lr=5e-6, steps=3, sft_steps=30, sft_batch_size=8,
        sft_lr=5e-5,
    ),
}
TOLERANCE = 0.1
"""Largest relative difference of the two sides' generated and trained-on token totals a ratio is printed for."""
WORK = ("completions", "generated_tokens", "backward_tokens", "optimizer_steps")


class TRLMissing(RuntimeError):
    """trl is not installed."""


class UnequalWork(RuntimeError):
    """The two sides of a comparison did different work: no ratio."""


def our_flags(w: Workload, output_dir: str) -> list[str]:
    """`python -m algos.train` flags of the workload: one update of all samples per iteration, nothing else
    (an update whenever any sample has a nonzero advantage, none held for later)."""
    kwargs = [x for k, v in w.env_kwargs.items() for x in (k, json.dumps(v))]
    return [
        "--env", w.env, "--env-kwargs", *kwargs, "--algo", "grpo", "--model", w.path, "--reward", "numeric",
        "--invalid-penalty", "0", "--iterations", str(w.steps + 1), "--seed", str(w.seed),
        "--num-groups", str(w.prompts_per_step), "--group-size", str(w.group_size),
        "--max-new-tokens", str(w.max_new_tokens), "--temperature", str(w.temperature), "--top-p", "1.0",
        "--generation-batch-size", str(w.completions_per_step),  # one generate call, as TRL
        "--loss-type", w.loss_type, "--lr", str(w.lr), "--warmup-steps", "0", "--beta", "0",
        "--epsilon", str(w.epsilon), "--epsilon-high", str(w.epsilon_high), "--max-grad-norm", str(w.max_grad_norm),
        "--num-minibatches", "1", "--ppo-epochs", "1", "--micro-batch-size", str(w.completions_per_step),
        "--sft-steps", "0", "--eval-episodes", "0", "--audit-every", "0", "--save-every", "0",
        "--no-dynamic-sampling", "--task-sampler", "uniform", "--min-update-samples", "0", "--short-batch", "skip",
        "--device", "cpu", "--dtype", "float32", "--autocast", "off", "--output-dir", output_dir,
    ]  # fmt: skip


def warm_start(w: Workload, out: Path) -> Workload:
    """The workload starting from our SFT warm-up of its model on its env (`w.sft_steps` steps, seed
    `w.seed`), saved under `out`; `w` itself when `sft_steps` is 0."""
    from algos.train import main as train_main

    if not w.sft_steps:
        return w
    run = out / "warm-up"
    flags = [*our_flags(w, str(run)), "--sft-steps", str(w.sft_steps), "--sft-batch-size", str(w.sft_batch_size),
             "--sft-lr", str(w.sft_lr), "--iterations", "1", "--overwrite"]  # fmt: skip
    if train_main(flags) != 0:
        raise RuntimeError("the SFT warm-up failed (see the error above)")
    return replace(w, start=str(run / "checkpoints" / "iter_0"))  # the checkpoint saved right after the warm-up


def prompt_rows(w: Workload) -> list[dict]:
    """One row per prompt, in the order our trainer visits them (steps + 1 iterations of
    `prompts_per_step` env resets at the seeds its task sampler draws): chat messages exactly as
    our agent builds them, our prompt token ids, the reference answer, the seed."""
    import gymnasium as gym

    from agents.agent import LLMAgent, View
    from agents.model import load_tokenizer, resolve_model
    from agents.prompt import PromptBuilder
    from algos.cli import parse_config
    from algos.config import env_kwargs
    from algos.data import task_sampler
    from envs import prompt_template

    cfg = parse_config(our_flags(w, "unused"))
    env = gym.make(cfg.env, **env_kwargs(cfg))
    sampler = task_sampler(cfg.data, getattr(env.unwrapped, "num_tasks", None), cfg.seed, cfg.env)  # the same pool, mode and seed as the trainer's
    sampling = cfg.sampling
    template = prompt_template(cfg.env) if sampling.prompt_template == "auto" else sampling.prompt_template
    builder = PromptBuilder(sampling.memory, template=template)
    tokenizer = load_tokenizer(resolve_model(cfg.model))
    agent = LLMAgent(tokenizer, None, builder, sampling.sampling(), sampling.max_prompt_tokens)
    rows = []
    for step in range(cfg.iterations):
        for seed in sampler.sample(cfg.data.num_groups):
            obs, info = env.reset(seed=seed)
            admissible = info.get("admissible_commands")
            view = View(str(info.get("task", "")), (), obs, tuple(admissible) if admissible is not None else None)
            messages = builder.messages(view.task, [], obs, list(admissible) if admissible is not None else None)
            rows.append(dict(prompt=messages, answer=str(info["answer"]), seed=seed, step=step,
                             prompt_ids=agent.prompt_ids(view)))  # fmt: skip
        sampler.step()
    env.close()
    return rows


def summary(step_seconds: list[float], work: list[dict], reward_mean: float) -> dict:
    """One side's timed steps: their seconds and the work each did (`WORK` keys)."""
    seconds = sum(step_seconds)
    total = {k: sum(step[k] for step in work) for k in WORK}
    return {
        "completions": total["completions"],
        "seconds": seconds,
        "completions_per_s": total["completions"] / seconds if seconds > 0 else float("nan"),
        "generated_tokens_per_s": total["generated_tokens"] / seconds if seconds > 0 else float("nan"),
        "step_seconds": step_seconds,
        "mean_completion_tokens": total["generated_tokens"] / max(total["completions"], 1),
        "reward_mean": reward_mean,
        "work": work,
        "work_total": total,
    }


def check_equal_work(ours: dict, trl: dict, tolerance: float = TOLERANCE) -> None:
    """Raise UnequalWork, naming what differs, unless both sides took the same number of steps with the
    same completions and optimizer steps each, and generated and trained on token totals within `tolerance`."""
    a, b = ours["work"], trl["work"]
    if len(a) != len(b):
        raise UnequalWork(f"the sides timed {len(a)} and {len(b)} steps")
    for key in ("completions", "optimizer_steps"):
        if [s[key] for s in a] != [s[key] for s in b]:
            raise UnequalWork(f"{key} per step differ: ours {[s[key] for s in a]}, TRL {[s[key] for s in b]}"
                              + (" (our update was skipped: no group had varied rewards)"
                                 if key == "optimizer_steps" and any(s[key] == 0 for s in a) else ""))  # fmt: skip
    for key in ("generated_tokens", "backward_tokens"):
        x, y = ours["work_total"][key], trl["work_total"][key]
        if abs(x - y) > tolerance * max(x, y, 1):
            raise UnequalWork(f"{key} differ by more than {tolerance:.0%}: ours {x:g}, TRL {y:g}")


def prompt_rows_check(w: Workload, seeds: dict[int, int]) -> None:
    """Our run visited the tasks the TRL dataset holds (the first group's seed of each iteration)."""
    expected = {r["step"] + 1: r["seed"] for r in prompt_rows(w)[:: w.prompts_per_step]}
    if any(seeds.get(it) != seed for it, seed in expected.items()):
        raise RuntimeError(f"our trainer visited other tasks than the TRL dataset holds: {seeds} vs {expected}")


# ---- ours -------------------------------------------------------------------------------
def run_ours(w: Workload) -> dict:
    """algos.train in this process into a temporary run directory; times from its metrics.jsonl."""
    from algos.run_dir import read_metrics
    from algos.train import main as train_main

    with tempfile.TemporaryDirectory(prefix="trl_compare_ours_") as tmp:
        run = Path(tmp) / "run"
        if train_main(our_flags(w, str(run))) != 0:
            raise RuntimeError("our trainer failed (see the error above)")
        rows = read_metrics(run)
        iters = [r for r in rows if "time/wall_s" in r]
        seeds = {json.loads(line)["iteration"]: json.loads(line)["seed"]
                 for line in (run / "transcripts.jsonl").read_text().splitlines()}  # fmt: skip
    if len(iters) != w.steps + 1:
        raise RuntimeError(f"expected {w.steps + 1} iterations in metrics.jsonl, found {len(iters)}")
    prompt_rows_check(w, seeds)
    timed = iters[1:]
    episodes = [round(r["data/groups_collected"] * r["data/mean_group_size"]) for r in timed]
    if any(n != w.completions_per_step or r["rollout/steps"] != n for n, r in zip(episodes, timed)):
        raise RuntimeError(f"expected {w.completions_per_step} single-step episodes per iteration, got {episodes}")
    work = [{"completions": n, "generated_tokens": round(r["rollout/response_tokens"] * r["rollout/steps"]),
             "backward_tokens": round(r.get("train/backward_tokens", 0.0)),
             "optimizer_steps": round(r.get("train/optimizer_steps", 0.0))} for n, r in zip(episodes, timed)]  # fmt: skip
    reward = sum(r["rollout/episode_return"] for r in timed) / len(timed)
    return summary([r["time/wall_s"] for r in timed], work, reward)


# ---- TRL --------------------------------------------------------------------------------
def trl_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """Our `--reward numeric`: the parsed <action> states the reference number."""
    from agents.parser import parse_action
    from rewards.verifiers import numeric

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [numeric(parse_action(t)[0], a) for t, a in zip(texts, answer)]


def run_trl(w: Workload) -> dict:
    """TRL's GRPOTrainer on the same model, prompts and hyperparameters; times from a callback."""
    if importlib.util.find_spec("trl") is None:
        raise TRLMissing("trl is not installed; pip install -e .[bench]")
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM")  # vLLM plays no part here
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agents.model import load_model, load_tokenizer, resolve_model

    class StepClock(TrainerCallback):
        """Step ends, and the work of each step: one entry per generate call, counted into by the loss
        and by the optimizer steps that follow it."""

        def __init__(self) -> None:
            self.ends: list[float] = []
            self.work: list[dict] = []
            self.rewards: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

        def on_optimizer_step(self, args, state, control, **kwargs):
            self.work[-1]["optimizer_steps"] += 1

    def recording(trainer, clock: StepClock) -> None:
        generate, compute_loss = trainer._generate_and_score_completions, trainer.compute_loss

        def recorded_generate(inputs):
            out = generate(inputs)
            clock.work.append({"completions": int(out["completion_ids"].shape[0]),
                               "generated_tokens": int(out["completion_mask"].sum()), "backward_tokens": 0,
                               "optimizer_steps": 0})  # fmt: skip
            return out

        def recorded_loss(model, inputs, *args, **kwargs):
            mask = inputs["completion_mask"]  # the loss mask of TRL's _compute_loss
            mask = mask * inputs["tool_mask"] if inputs.get("tool_mask") is not None else mask
            clock.work[-1]["backward_tokens"] += int(mask.sum())
            return compute_loss(model, inputs, *args, **kwargs)

        trainer._generate_and_score_completions, trainer.compute_loss = recorded_generate, recorded_loss

    def reward(completions: list, answer: list[str], **kwargs) -> list[float]:
        scores = trl_reward(completions, answer)
        clock.rewards.append(sum(scores) / len(scores))
        return scores

    rows = prompt_rows(w)
    path = resolve_model(w.path)
    tokenizer = load_tokenizer(path)
    model = load_model(path, "cpu", torch.float32)
    clock = StepClock()
    with tempfile.TemporaryDirectory(prefix="trl_compare_trl_") as tmp:
        args = GRPOConfig(
            output_dir=tmp, max_steps=w.steps + 1, seed=w.seed, use_cpu=True, bf16=False, fp16=False,
            per_device_train_batch_size=w.completions_per_step, num_generations=w.group_size,
            gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1, shuffle_dataset=False,
            max_completion_length=w.max_new_tokens, temperature=w.temperature, top_p=1.0, top_k=0, min_p=None,
            repetition_penalty=1.0, loss_type=w.loss_type, beta=0.0, epsilon=w.epsilon, epsilon_high=w.epsilon_high,
            scale_rewards="group", learning_rate=w.lr, lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, optim="adamw_torch", max_grad_norm=w.max_grad_norm, gradient_checkpointing=False,
            report_to="none", save_strategy="no", eval_strategy="no", logging_steps=1, disable_tqdm=True,
            log_completions=False, dataloader_num_workers=0,
        )  # fmt: skip
        data = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                              processing_class=tokenizer, callbacks=[clock])  # fmt: skip
        recording(trainer, clock)
        fed = trainer._tokenize_prompts([r["prompt"] for r in rows])[0]  # what TRL will generate from
        bad = [r["seed"] for r, ids in zip(rows, fed) if list(ids) != r["prompt_ids"]]
        if bad:
            raise RuntimeError(f"TRL's prompt token ids differ from LLMAgent.prompt_ids for seeds {bad}")
        trainer.train()
    if len(clock.ends) != w.steps + 1 or len(clock.work) != w.steps + 1:
        raise RuntimeError(f"expected {w.steps + 1} TRL steps, saw {len(clock.ends)} ({len(clock.work)} generations)")
    step_seconds = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
    return summary(step_seconds, clock.work[1:], sum(clock.rewards[1:]) / w.steps)


# ---- report -----------------------------------------------------------------------------
def print_comparison(ours: dict | None, trl: dict | None, w: Workload, tolerance: float = TOLERANCE) -> float | None:
    """The table (completions/s, seconds, the work per side), then ours / trl: the ratio (None with one
    side only); UnequalWork, after the table, when the sides did unequal work (`check_equal_work`)."""
    print(f"\n{w.env} {w.env_kwargs}, model {w.model} after {w.sft_steps} SFT steps, {w.prompts_per_step} prompts x "
          f"{w.group_size} completions per step, max {w.max_new_tokens} new tokens, {w.steps} timed steps (CPU)")  # fmt: skip
    print(f"{'side':6s} {'completions/s':>13s} {'seconds':>8s} {'completions':>11s} {'generated':>9s} "
          f"{'trained on':>10s} {'opt steps':>9s} {'reward':>6s}  step seconds")  # fmt: skip
    for side, r in (("ours", ours), ("trl", trl)):
        if r is None:
            continue
        t, steps = r["work_total"], " ".join(f"{s:.2f}" for s in r["step_seconds"])
        print(f"{side:6s} {r['completions_per_s']:13.1f} {r['seconds']:8.2f} {t['completions']:11d} "
              f"{t['generated_tokens']:9d} {t['backward_tokens']:10d} {t['optimizer_steps']:9d} "
              f"{r['reward_mean']:6.3f}  {steps}")  # fmt: skip
    if ours is None or trl is None:
        return None
    check_equal_work(ours, trl, tolerance)
    ratio = ours["completions_per_s"] / trl["completions_per_s"]
    print(f"ours / trl completions/s: {ratio:.2f}x over equal work (token totals within {tolerance:.0%})")
    return ratio


def parser(prog: str = "python -m benchmarks.trl_compare") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=list(WORKLOADS), default="tiny", help="the workload preset of this model")
    p.add_argument("--steps", type=int, help="timed optimizer steps after one untimed (default: the preset's)")
    p.add_argument("--sft-steps", type=int, help="the warm start's SFT steps (default: the preset's; 0: none)")
    p.add_argument("--prompts", type=int, help="prompts per step (default 8); a smaller workload")
    p.add_argument("--group-size", type=int, help="completions per prompt (default 8)")
    return p


def workload(argv: list[str], prog: str = "python -m benchmarks.trl_compare") -> Workload:
    """The preset of --model with the other flags' overrides (a bad flag: argparse's one-line error, exit 2)."""
    p = parser(prog)
    a = p.parse_args(argv)
    return _workload(p, a)


def _workload(p: argparse.ArgumentParser, a: argparse.Namespace) -> Workload:
    for name in ("steps", "prompts", "group_size"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.sft_steps is not None and a.sft_steps < 0:
        p.error("--sft-steps must be >= 0")
    w = WORKLOADS[a.model]
    chosen = {"steps": a.steps, "sft_steps": a.sft_steps, "prompts_per_step": a.prompts, "group_size": a.group_size}
    return replace(w, **{k: v for k, v in chosen.items() if v is not None})


def main(argv: list[str] | None = None) -> int:
    p = parser()
    p.add_argument("--side", choices=("both", "ours", "trl"), default="both")
    p.add_argument("--tolerance", type=float, default=TOLERANCE, help="token totals' largest relative gap")
    p.add_argument("--out", type=Path, help="also write the result here as summary.json")
    a = p.parse_args(argv)
    w = _workload(p, a)
    if a.side != "ours" and importlib.util.find_spec("trl") is None:
        print("error: trl is not installed; pip install -e .[bench]", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="trl_compare_") as tmp:
        w = warm_start(w, Path(tmp))
        ours = run_ours(w) if a.side in ("both", "ours") else None
        trl = run_trl(w) if a.side in ("both", "trl") else None
    try:
        ratio = print_comparison(ours, trl, w, a.tolerance)
    except UnequalWork as e:
        print(f"error: no ratio, the sides did unequal work: {e}", file=sys.stderr)
        ratio = None
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        result = {"workload": {**w.__dict__, "start": ""}, "ours": ours, "trl": trl, "ratio": ratio}
        (a.out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    return 1 if a.side == "both" and ratio is None else 0


if __name__ == "__main__":
    sys.exit(main())
