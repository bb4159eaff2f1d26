"""The reward stage: collected episodes in, the same episodes with composed rewards out.

Sits between the collector and the advantages: every step becomes a `RewardItem` (the
question it answered, the full response, the parsed action, the env's reward and the
reference answer the env gave), the reward layer (rewards/layer.py) scores them, and each
step's `reward` is replaced by the weighted sum. With the default `--reward env` the
rewards come out exactly as the env gave them.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

from agents.parser import parse_action
from algos.collector import Step, Trajectory
from algos.config import env_kwargs
from envs import env_metadata
from rewards.audit import audit_scalars, env_honeypots, jsonable, length_report, run_audit
from rewards.base import RewardItem
from rewards.layer import RewardLayer, build_scorer, parse_spec


def reward_item(step: Step, task: str) -> RewardItem:
    return RewardItem(
        question=step.observation,
        response=step.response,
        action=parse_action(step.response)[0],  # what the model answered, not the raw fallback sent
        answer=step.answer,
        task_type=step.task_type,
        task=task,
        env_reward=step.reward,
        response_tokens=len(step.response_ids),
    )


def answer_items(trajs: list[Trajectory]) -> list[RewardItem]:
    """The last step of every episode: the answer that outcome scorers judge."""
    return [reward_item(t.steps[-1], t.task) for t in trajs if t.steps]


def rescore(layer: RewardLayer, trajs: list[Trajectory]) -> list[Trajectory]:
    episodes = [[reward_item(s, t.task) for s in t.steps] for t in trajs]
    rewards = layer.score_episodes(episodes)
    return [replace(t, steps=[replace(s, reward=r) for s, r in zip(t.steps, rs)]) for t, rs in zip(trajs, rewards)]


def reward_layer(cfg, device: str) -> RewardLayer:
    """The run's reward sources (`--reward`), built once the config is validated."""
    env_rubric = env_metadata(cfg.env).get("rubric")
    sources = [(build_scorer(name, cfg.rewards, env_rubric, device), weight) for name, weight in parse_spec(cfg.rewards.reward)]
    return RewardLayer(sources, cfg.rewards.pass_threshold)


class AuditHook:
    """The in-training scorer audit: every `every` iterations, the run's scorers score honeypots
    and exploit probes mixed with this iteration's answers; the report goes to TensorBoard
    (audit/...) and to DIR/reward_audit.json (every audit so far)."""

    def __init__(self, layer: RewardLayer, cfg, path: str | os.PathLike) -> None:
        self.layer, self.cfg, self.path, self.history = layer, cfg, path, []
        self._first = self.honeypots(0)  # made now: an env without info["answer"] fails here, not mid-run

    def honeypots(self, k: int):
        """The k-th audit's honeypots: fresh problems every audit, the same ones for a given seed."""
        return env_honeypots(self.cfg.env, self.cfg.rewards.audit_honeypots, self.cfg.seed * 1000 + k, env_kwargs(self.cfg))

    def __call__(self, it: int, trajs: list[Trajectory]) -> dict[str, float]:
        real = answer_items(trajs)
        k = len(self.history)  # fresh problems each audit (a resumed run continues the count)
        honeypots = self._first if k == 0 else self.honeypots(k)
        report = run_audit(self.layer.scorers, honeypots, real, self.cfg.rewards.pass_threshold,
                           self.cfg.rewards.probe_threshold, seed=self.cfg.seed + it)  # fmt: skip
        report["length"] = length_report(real, [t.episode_return for t in trajs if t.steps], self.cfg.rewards.pass_threshold)
        self.history.append({"iteration": it, **report})
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(jsonable({"env": self.cfg.env, "reward": self.cfg.rewards.reward, "audits": self.history}), f, indent=1)
        os.replace(tmp, self.path)
        return audit_scalars(report)


def audit_hook(cfg, layer: RewardLayer, path: str | os.PathLike) -> AuditHook | None:
    """The audit when it is on and the env gives reference answers (honeypots need them)."""
    if not cfg.rewards.audit_every:
        return None
    try:
        return AuditHook(layer, cfg, path)
    except ValueError as e:  # a multi-step env without info["answer"]: nothing to audit against
        if cfg.rewards.reward != "env":
            print(f"reward audit off: {e}", file=sys.stderr)
        return None
