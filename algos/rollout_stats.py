"""Rollout metrics: what the collected episodes say, as namespaced scalars."""

from __future__ import annotations

import numpy as np

from algos.collector import Trajectory


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """What the episodes did; how their groups vary (rollout/frac_zero_std_groups) is the data layer's."""
    steps = [s for t in trajs for s in t.steps]
    returns = np.array([t.episode_return for t in trajs])
    return {
        "rollout/success_rate": float(np.mean([t.won for t in trajs])),
        "rollout/episode_return": float(returns.mean()),
        "rollout/episode_length": float(np.mean([len(t.steps) for t in trajs])),
        "rollout/invalid_action_rate": float(np.mean([not s.action_valid for s in steps])),
        "rollout/parse_error_rate": float(np.mean([s.parse_status != "ok" for s in steps])),
        "rollout/response_tokens": float(np.mean([len(s.response_ids) for s in steps])),
        "rollout/prompt_tokens": float(np.mean([len(s.prompt_ids) for s in steps])),
        "rollout/steps": float(len(steps)),
        "rollout/env_errors": float(sum(s.env_error for s in steps)),
        "rollout/context_truncated": float(sum(s.context_truncated for s in steps)),  # episodes (chat context)
    }


def transcript(traj: Trajectory, advantages: dict[tuple[int, int], float] | None = None, decode=None,
               chat: bool = False) -> dict:  # fmt: skip
    """One episode as a JSON-able record: per step the prompt the model saw (`decode`: token
    ids -> text), the response, the action sent, the reward and the advantage. `chat`: the episode
    is one conversation, recorded once (`conversation`: its text, the last prompt and reply) instead
    of a prompt per step."""
    rows = []
    for s in traj.steps:
        row = dict(t=s.t, observation=s.observation, response=s.response, action=s.action,
                   status=s.parse_status, valid=s.action_valid, reward=s.reward)  # fmt: skip
        if decode is not None and not chat:
            row["prompt"] = decode(s.prompt_ids)
        if s.answer is not None:
            row["answer"] = s.answer
        if advantages is not None:
            row["advantage"] = advantages.get((s.traj_id, s.t))
        rows.append(row)
    record = dict(group=traj.group_id, seed=traj.seed, task=traj.task, won=traj.won, steps=rows)
    if chat and decode is not None and traj.steps:
        record["conversation"] = decode(traj.steps[-1].prompt_ids + traj.steps[-1].response_ids)
    return record


def transcript_markdown(record: dict) -> str:
    lines = [f"**task** {record['task']}  **seed** {record['seed']}  **won** {record['won']}", ""]
    if record.get("conversation") is not None:
        lines += [*("    " + line for line in record["conversation"].splitlines()), ""]
    for r in record["steps"]:
        adv = f" adv={r['advantage']:+.3f}" if r.get("advantage") is not None else ""
        if r.get("prompt") is not None:  # indented: markdown shows it verbatim
            lines += ["", *("    " + line for line in r["prompt"].splitlines()), ""]
        lines.append(f"{r['t']}. {r['observation']}  ")
        lines.append(f"   -> `{r['response']}` [{r['status']}] action `{r['action']}` r={r['reward']:g}{adv}  ")
    return "\n".join(lines)
