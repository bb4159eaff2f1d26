"""Held-out evaluation: play tasks with a policy, in batches, and summarise the episodes.

Shared by the trainer's periodic evaluation (algos/train.py) and `python -m scripts.evaluate`.
Tasks are reset seeds from HELD_OUT_SEED on (never in the training pool). A policy is
anything with the agent's `act(views)`: the LLM agent, or a scripted baseline (a random
admissible command, the env's expert action).
"""

from __future__ import annotations

import math
import random
import sys

import numpy as np
from tqdm import tqdm

from agents.agent import Act
from agents.parser import OK
from algos.collector import Collector, Trajectory
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
