"""Held-out evaluation: play tasks with a policy, in batches, summarise the episodes, and say what
changed between two policies played on the same tasks (`paired_lift`, with its 95 % interval).

Shared by the trainer's evaluations (`evaluate`, called by algos/run.py) and `python -m scripts.evaluate`.
Tasks are reset seeds from HELD_OUT_SEED on (never in the training pool). A policy is
anything with the agent's `act(views)`: the LLM agent, or a scripted baseline (a random
admissible command, the env's expert action).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from agents.agent import Act, LLMAgent
from agents.parser import OK
from algos import distributed
from algos.collector import Collector, Trajectory
from algos.config import Config, env_kwargs
from envs.base import HELD_OUT_SEED
from envs.workers import WorkerConfig
from rewards.audit import wilson


def held_out_seeds(k: int) -> list[int]:
    """The first k held-out tasks: the same for every run and every checkpoint."""
    return [HELD_OUT_SEED + i for i in range(k)]


class ScriptedAgent:
    """A baseline policy behind the agent's `act` interface: a random admissible command, or the
    env's expert action. No tokens: nothing here is trained."""

    def __init__(self, kind: str, seed: int) -> None:
        self.kind, self.rng = kind, random.Random(seed)

    def act(self, views) -> list[Act]:
        acts = []
        for v in views:
            if self.kind == "expert":
                command = v.expert or ""
            else:
                command = self.rng.choice(v.admissible) if v.admissible else ""
            acts.append(Act(command, OK if command else "empty", command, [], [], []))
        return acts


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def summarize(trajs: list[Trajectory], samples: int = 1) -> dict:
    """Success (95 % Wilson interval), pass@k for k <= samples, return, steps, invalid actions, per task."""
    by_task: dict[int, list] = {}
    for t in trajs:
        by_task.setdefault(t.seed, []).append(t)
    wins = sum(t.won for t in trajs)
    steps = [s for t in trajs for s in t.steps]
    rows = []
    for seed, group in sorted(by_task.items()):
        rows.append({
            "seed": seed,
            "task": group[0].task,
            "episodes": len(group),
            "successes": sum(t.won for t in group),
            "success_rate": float(np.mean([t.won for t in group])),
            "mean_return": float(np.mean([t.episode_return for t in group])),
            "mean_steps": float(np.mean([len(t.steps) for t in group])),
        })  # fmt: skip
    return {
        "episodes": len(trajs),
        "success_rate": wins / len(trajs),
        "success_ci95": list(wilson(wins, len(trajs))),
        "pass_at_k": {str(k): float(np.mean([pass_at_k(r["episodes"], r["successes"], k) for r in rows]))
                      for k in range(1, samples + 1)},  # fmt: skip
        "mean_return": float(np.mean([t.episode_return for t in trajs])),
        "mean_steps": float(np.mean([len(t.steps) for t in trajs])),
        "invalid_action_rate": float(np.mean([not s.action_valid for s in steps])) if steps else 0.0,
        "episode_steps": [len(t.steps) for t in trajs],
        "tasks": rows,
    }


def play(agent, env_id: str, env_kwargs: dict, seeds: list[int], samples: int = 1, max_envs: int = 256,
         desc: str = "evaluation", leave: bool = True, workers: WorkerConfig | None = None) -> list[Trajectory]:
    """Every task `samples` times, in batches of at most max_envs envs, with a progress bar."""
    per_batch = max(1, max_envs // samples)
    collector = Collector(env_id, min(per_batch, len(seeds)), samples, env_kwargs, workers)
    trajs = []
    with tqdm(total=len(seeds) * samples, desc=desc, unit="ep", file=sys.stderr, leave=leave, dynamic_ncols=True) as bar:
        for start in range(0, len(seeds), per_batch):
            chunk = seeds[start : start + per_batch]
            trajs += collector.collect(agent, chunk, first_traj_id=len(trajs), first_group_id=start, on_done=bar.update)
    collector.close()
    return trajs


@dataclass(frozen=True)
class HeldOut:
    """One held-out evaluation: the metrics it logs and each task's outcome (task seed -> won, per
    episode), which `paired_lift` pairs with another evaluation's on the same tasks."""

    metrics: dict[str, float]
    outcomes: dict[int, list[bool]]
    episodes: tuple[tuple[int, bool, int], ...] = ()
    """Every episode in play order: (task seed, won, env steps); a run writes them to held_out.jsonl."""

    def record(self) -> dict[str, list]:
        """The episodes as columns (task, won, steps): one compact JSON row per evaluation."""
        return {"task": [e[0] for e in self.episodes], "won": [e[1] for e in self.episodes],
                "steps": [e[2] for e in self.episodes]}  # fmt: skip

    @property
    def success_rate(self) -> float:
        return self.metrics["eval/success_rate"]


def evaluate(agent: LLMAgent, cfg: Config, episodes: int, world=distributed.SINGLE) -> HeldOut:
    """Held-out episodes, one per task, sampled at the training temperature (algos/evaluation.py);
    under torchrun each rank plays its share of the tasks, and every rank gets all of them."""
    seeds = held_out_seeds(episodes)[world.rank :: world.size]
    trajs = play(agent, cfg.env, env_kwargs(cfg), seeds, max_envs=episodes, leave=False,
                 workers=cfg.workers) if seeds else []  # fmt: skip
    every = [t for part in distributed.gather(trajs, world) for t in part]
    m = summarize(every)
    episodes = tuple((t.seed, bool(t.won), len(t.steps)) for t in sorted(every, key=lambda t: t.traj_id))
    return HeldOut({"eval/success_rate": m["success_rate"], "eval/episode_length": m["mean_steps"],
                    "eval/invalid_action_rate": m["invalid_action_rate"]}, outcomes(every), episodes)  # fmt: skip


# ---- intervals: what changed between two policies on the same tasks ---------------------------
# Two-sided 95 % quantiles of Student's t, by degrees of freedom (1-30); beyond, the normal's 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)  # fmt: skip


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; nan for fewer than two values)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def interval95(values: Sequence[float]) -> tuple[float, float]:
    """The t-based 95 % confidence interval of the mean (nan, nan for fewer than two values)."""
    mean, std = mean_std(values)
    if math.isnan(std):
        return math.nan, math.nan
    half = (T975[len(values) - 2] if len(values) - 1 <= len(T975) else 1.96) * std / math.sqrt(len(values))
    return mean - half, mean + half


def newcombe_paired(before: Sequence[bool], after: Sequence[bool], z: float = 1.96) -> tuple[float, float, float]:
    """after - before as a difference of paired proportions (pair i: the same task played by both), with
    Newcombe's hybrid score interval for paired data (Statist. Med. 1998, 17:2635, method 10: Wilson
    intervals of both proportions, combined with the continuity-corrected phi of the 2x2 table).
    Returns (difference, low, high) as fractions. Unlike a t interval over the per-task differences it
    stays informative when no pair differs (an interval of width 0 would claim certainty)."""
    n = len(before)
    if n == 0 or len(after) != n:
        raise ValueError(f"need the same tasks on both sides (got {n} and {len(after)})")
    both = sum(b and a for b, a in zip(before, after))
    only_before = sum(b and not a for b, a in zip(before, after))
    only_after = sum(a and not b for b, a in zip(before, after))
    neither = n - both - only_before - only_after
    p_b, p_a = (both + only_before) / n, (both + only_after) / n
    l_b, u_b = wilson(both + only_before, n, z)
    l_a, u_a = wilson(both + only_after, n, z)
    cross = both * neither - only_before * only_after
    cross = cross - n / 2 if cross > n / 2 else min(cross, 0)  # Newcombe's continuity correction of phi
    margins = (both + only_before) * (only_after + neither) * (both + only_after) * (only_before + neither)
    phi = cross / math.sqrt(margins) if margins else 0.0
    diff = p_a - p_b
    low = diff - math.sqrt(max(0.0, (p_a - l_a) ** 2 - 2 * phi * (p_a - l_a) * (u_b - p_b) + (u_b - p_b) ** 2))
    high = diff + math.sqrt(max(0.0, (u_a - p_a) ** 2 - 2 * phi * (u_a - p_a) * (p_b - l_b) + (p_b - l_b) ** 2))
    return diff, low, high


@dataclass(frozen=True)
class Lift:
    """after - before on the same held-out tasks, in points, with its 95 % interval."""

    points: float
    low: float
    high: float
    tasks: int
    episodes: int
    """Episodes behind it on each side (tasks x episodes per task)."""
    method: str
    """newcombe (one episode per task: paired proportions) or t (several: the per-task mean differences)."""

    def line(self, what: str) -> str:
        """One line: `what` (e.g. "RL's lift over the warm-up"), the points, the interval, what it rests on."""
        each = "one episode" if self.episodes == self.tasks else f"{self.episodes // self.tasks} episodes"
        return (f"{what}: {self.points:+.1f} points, 95 % interval [{self.low:+.1f}, {self.high:+.1f}] "
                f"({self.tasks} held-out tasks, {each} each before and after)")

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}": self.points, f"{prefix}_low": self.low, f"{prefix}_high": self.high}


def paired_lift(before: dict[int, list[bool]], after: dict[int, list[bool]]) -> Lift | None:
    """after - before over the tasks both played (task seed -> each episode's outcome); None if none.
    One episode per task on each side: Newcombe's paired interval (`newcombe_paired`); several: the
    t interval of the per-task differences of success rates (tasks are the independent units)."""
    tasks = sorted(set(before) & set(after))
    if not tasks:
        return None
    episodes = sum(min(len(before[t]), len(after[t])) for t in tasks)
    if all(len(before[t]) == len(after[t]) == 1 for t in tasks):
        diff, low, high = newcombe_paired([before[t][0] for t in tasks], [after[t][0] for t in tasks])
        return Lift(100 * diff, 100 * low, 100 * high, len(tasks), episodes, "newcombe")
    diffs = [100 * (float(np.mean(after[t])) - float(np.mean(before[t]))) for t in tasks]
    low, high = interval95(diffs)
    return Lift(float(np.mean(diffs)), low, high, len(tasks), episodes, "t")


def outcomes(trajs: list[Trajectory]) -> dict[int, list[bool]]:
    """Each task's episodes (task seed -> won, in play order): what `paired_lift` pairs."""
    out: dict[int, list[bool]] = {}
    for t in sorted(trajs, key=lambda t: t.traj_id):
        out.setdefault(t.seed, []).append(bool(t.won))
    return out
