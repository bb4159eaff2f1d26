"""Completions per second of our trainer vs TRL's GRPOTrainer on one identical single-turn workload (CPU).

    python -m benchmarks.trl_compare [--steps 6] [--side both|ours|trl]      # needs `pip install -e .[bench]`

Both sides load the same tiny model fresh (float32, CPU) and train it with GRPO for 1 + steps
optimizer steps; the first step (warm-up of caches and allocators) is not timed, nor is loading.
One step: 8 prompts x 8 completions = 64 completions sampled at temperature 1 (no top-k/top-p/
min-p/repetition filtering, at most 16 new tokens), rewarded, one PPO-clip update on all 64 at
once (loss dapo, beta 0, epsilon 0.2 / 0.28, max_grad_norm 1, constant lr). The prompts are the
same, in the same order: the env resets at the seeds our uniform task sampler draws, made into
chat messages exactly as our agent makes them; TRL gets them as a conversational "prompt" column
and applies the same chat template, and its token ids are checked against `LLMAgent.prompt_ids`.
The reward is ours on both sides: `--reward numeric` of the parsed <action> (no invalid-action
penalty, which TRL has no counterpart of).

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
from dataclasses import dataclass, field
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

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.group_size


class TRLMissing(RuntimeError):
    """trl is not installed."""


def our_flags(w: Workload, output_dir: str) -> list[str]:
    """`python -m algos.train` flags of the workload: one update of all samples per iteration, nothing else."""
    kwargs = [x for k, v in w.env_kwargs.items() for x in (k, json.dumps(v))]
    return [
        "--env", w.env, "--env-kwargs", *kwargs, "--algo", "grpo", "--model", w.model, "--reward", "numeric",
        "--invalid-penalty", "0", "--iterations", str(w.steps + 1), "--seed", str(w.seed),
        "--num-groups", str(w.prompts_per_step), "--group-size", str(w.group_size),
        "--max-new-tokens", str(w.max_new_tokens), "--temperature", str(w.temperature), "--top-p", "1.0",
        "--generation-batch-size", str(w.completions_per_step),  # one generate call, as TRL
        "--loss-type", w.loss_type, "--lr", str(w.lr), "--warmup-steps", "0", "--beta", "0",
        "--epsilon", str(w.epsilon), "--epsilon-high", str(w.epsilon_high), "--max-grad-norm", str(w.max_grad_norm),
        "--num-minibatches", "1", "--ppo-epochs", "1", "--micro-batch-size", str(w.completions_per_step),
        "--sft-steps", "0", "--eval-episodes", "0", "--audit-every", "0", "--save-every", "0",
        "--no-dynamic-sampling", "--task-sampler", "uniform",
        "--device", "cpu", "--dtype", "float32", "--autocast", "off", "--output-dir", output_dir,
    ]  # fmt: skip


def prompt_rows(w: Workload) -> list[dict]:
    """One row per prompt, in the order our trainer visits them (steps + 1 iterations of
    `prompts_per_step` env resets at the seeds its task sampler draws): chat messages exactly as
    our agent builds them, our prompt token ids, the reference answer, the seed."""
    import gymnasium as gym

    from agents.agent import LLMAgent, View
    from agents.model import load_tokenizer, resolve_model
    from agents.prompt import PromptBuilder
    from algos.config import env_kwargs, parse_config
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


def summary(step_seconds: list[float], completions_per_step: list[int], lengths: list[float]) -> dict:
    seconds, completions = sum(step_seconds), sum(completions_per_step)
    return {
        "completions": completions,
        "seconds": seconds,
        "completions_per_s": completions / seconds if seconds > 0 else float("nan"),
        "step_seconds": step_seconds,
        "mean_completion_tokens": sum(lengths) / len(lengths) if lengths else float("nan"),
    }


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
    expected = {r["step"] + 1: r["seed"] for r in prompt_rows(w)[:: w.prompts_per_step]}  # first group's seed
    if any(seeds.get(it) != seed for it, seed in expected.items()):
        raise RuntimeError(f"our trainer visited other tasks than the TRL dataset holds: {seeds} vs {expected}")
    timed = iters[1:]
    episodes = [round(r["data/groups_collected"] * r["data/mean_group_size"]) for r in timed]
    if any(n != w.completions_per_step or r["rollout/steps"] != n for n, r in zip(episodes, timed)):
        raise RuntimeError(f"expected {w.completions_per_step} single-step episodes per iteration, got {episodes}")
    out = summary([r["time/wall_s"] for r in timed], episodes, [r["rollout/response_tokens"] for r in timed])
    out["reward_mean"] = sum(r["rollout/episode_return"] for r in timed) / len(timed)
    return out


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
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.lengths: dict[int, float] = {}

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                self.lengths[state.global_step] = logs["completions/mean_length"]

    rows = prompt_rows(w)
    path = resolve_model(w.model)
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
        trainer = GRPOTrainer(model=model, reward_funcs=trl_reward, args=args, train_dataset=data,
                              processing_class=tokenizer, callbacks=[clock])  # fmt: skip
        fed = trainer._tokenize_prompts([r["prompt"] for r in rows])[0]  # what TRL will generate from
        bad = [r["seed"] for r, ids in zip(rows, fed) if list(ids) != r["prompt_ids"]]
        if bad:
            raise RuntimeError(f"TRL's prompt token ids differ from LLMAgent.prompt_ids for seeds {bad}")
        trainer.train()
    if len(clock.ends) != w.steps + 1:
        raise RuntimeError(f"expected {w.steps + 1} TRL steps, saw {len(clock.ends)}")
    step_seconds = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
    lengths = [clock.lengths[s] for s in range(2, w.steps + 2) if s in clock.lengths]
    return summary(step_seconds, [w.completions_per_step] * w.steps, lengths)


# ---- report -----------------------------------------------------------------------------
def print_comparison(ours: dict | None, trl: dict | None, w: Workload | None = None) -> None:
    """The table: completions/s, seconds and mean completion tokens per side, then ours / trl."""
    w = w or Workload(steps=len((ours or trl or {}).get("step_seconds", [])) or Workload.steps)
    print(f"\n{w.env} {w.env_kwargs}, model {w.model}, {w.prompts_per_step} prompts x {w.group_size} completions "
          f"per step, max {w.max_new_tokens} new tokens, {w.steps} timed steps (CPU)")  # fmt: skip
    print(f"{'side':6s} {'completions/s':>13s} {'seconds':>8s} {'mean completion tokens':>22s}  step seconds")
    for side, r in (("ours", ours), ("trl", trl)):
        if r is None:
            continue
        steps = " ".join(f"{s:.2f}" for s in r["step_seconds"])
        print(f"{side:6s} {r['completions_per_s']:13.1f} {r['seconds']:8.2f} {r['mean_completion_tokens']:22.2f}  "
              f"{steps}")  # fmt: skip
    if ours is not None and trl is not None:
        print(f"ours / trl completions/s: {ours['completions_per_s'] / trl['completions_per_s']:.2f}x")
        gap = abs(ours["mean_completion_tokens"] - trl["mean_completion_tokens"])
        if gap > 0.1 * max(ours["mean_completion_tokens"], trl["mean_completion_tokens"]):
            print(f"warning: mean completion lengths differ by {gap:.1f} tokens; the sides did unequal work")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.trl_compare", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=Workload.steps, help="timed optimizer steps (after one untimed)")
    p.add_argument("--side", choices=("both", "ours", "trl"), default="both")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be >= 1")
    if a.side != "ours" and importlib.util.find_spec("trl") is None:
        print("error: trl is not installed; pip install -e .[bench]", file=sys.stderr)
        return 2
    w = Workload(steps=a.steps)
    ours = run_ours(w) if a.side in ("both", "ours") else None
    trl = run_trl(w) if a.side in ("both", "trl") else None
    print_comparison(ours, trl, w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
