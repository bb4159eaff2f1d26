"""A batch's credit: from its step records to one advantage per row under the run's --algo and
advantage section (algos/advantages.py computes them), and what the logs say about it.

- compute_advantages: the trainer's call. Places the invalid-action penalty (inside the rewards, or
  on its own row: `advantage_inputs`), keys the anchors, dispatches to the estimator, and returns
  the batch's statistics: anchor-group sizes, the advantages' spread, the share of GiGPO's step
  term (`step_signal`) and the refused actions the update would make likelier (`invalid_positive`).
- informative / informative_sample: whether a group, or a training sample, teaches anything (what
  dynamic sampling keeps, and what the minimum-update guard counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from algos.advantages import (
    F32,
    F64,
    I64,
    AdvantageConfig,
    anchor_group_sizes,
    gigpo_terms,
    grpo_advantages,
    penalty_placement,
    rloo_advantages,
    similarity_keys,
)

if TYPE_CHECKING:
    from algos.collector import Step, Trajectory

NEGLIGIBLE = 1e-6  # |advantage| below this is float noise around zero: the sample teaches nothing


def compute_advantages(algo: str, cfg: AdvantageConfig, steps: Sequence[Step]) -> tuple[F32, dict[str, float]]:
    """One advantage per step row (rows of a trajectory in time order) for --algo `algo`, and the
    batch's advantage and anchor-group statistics."""
    rewards, traj_ids, group_ids, keys, common = advantage_inputs(cfg, steps, algo)
    split = {}
    if algo == "gigpo":
        ep, step = gigpo_terms(rewards, traj_ids, group_ids, keys, gamma=cfg.gamma, **common)
        adv = (ep + cfg.omega * step).astype(np.float32)
        split = step_signal(ep, cfg.omega * step)
    elif algo == "rloo":
        adv = rloo_advantages(rewards, traj_ids, group_ids)
    else:
        adv = grpo_advantages(rewards, traj_ids, group_ids, **common)
    sizes = anchor_group_sizes(group_ids, keys)
    stats = {
        "gigpo/anchor_group_size_mean": float(sizes.mean()),
        "gigpo/singleton_frac": float((sizes == 1).mean()),
        "adv/mean": float(adv.mean()),
        "adv/std": float(adv.std()),
        "adv/abs_max": float(np.abs(adv).max()),
        "adv/invalid_positive_frac": invalid_positive(adv, steps),
        **split,
    }
    return adv, stats


def invalid_positive(adv: npt.ArrayLike, steps: Sequence[Step]) -> float:
    """The fraction of invalid-action rows whose advantage is positive (0 when there are none): actions
    the update makes more likely although the env refused them."""
    invalid = np.array([not s.action_valid for s in steps], dtype=bool)
    return float((np.asarray(adv)[invalid] > 0).mean()) if invalid.any() else 0.0


def advantage_inputs(cfg: AdvantageConfig, steps: Sequence[Step], algo: str) -> tuple[F64, I64, I64, list, dict]:
    """What the advantage functions take for these step rows under `cfg` and --algo `algo`: (rewards,
    with the invalid-action penalty inside them unless it is placed on the step; traj ids; group ids;
    anchor keys; the keyword options, with the per-row penalties when they are placed on the step)."""
    penalty = np.array([cfg.invalid_penalty * (not s.action_valid) for s in steps])
    rewards = np.array([s.reward for s in steps])
    placed = dict(penalties=penalty) if penalty_placement(cfg, algo) == "step" and cfg.invalid_penalty else {}
    if not placed:  # inside the returns: the step's reward, before returns and advantages
        rewards = rewards - penalty
    traj_ids = np.array([s.traj_id for s in steps])
    group_ids = np.array([s.group_id for s in steps])
    if cfg.anchor == "similarity":
        keys = list(similarity_keys(group_ids, [s.observation for s in steps], cfg.similarity_threshold))
    else:
        keys = [s.state_key for s in steps]
    common = dict(norm=cfg.norm, episode_baseline=cfg.episode_baseline, scale=cfg.scale, **placed)
    return rewards, traj_ids, group_ids, keys, common


def step_signal(episode: F64, step: F64) -> dict[str, float]:
    """How much of a GiGPO batch's advantage comes from the step term (`step`: already times omega):
    its share of the summed magnitudes, sum|step| / (sum|episode| + sum|step|) (0 for an all-zero
    batch); the fraction of rows where it is not 0 (rows whose anchor group saw different returns;
    magnitudes below NEGLIGIBLE count as 0, as in the sign test);
    and the fraction of rows whose GiGPO advantage has another sign than the episode term alone, GRPO's
    direction (the step term overrules it, or directs a row it leaves at 0): where the two disagree."""
    if not len(step):
        return {"gigpo/step_share": 0.0, "gigpo/step_nonzero_frac": 0.0, "gigpo/sign_change_frac": 0.0}
    e, s = float(np.abs(episode).sum()), float(np.abs(step).sum())
    return {
        "gigpo/step_share": s / (e + s) if e + s > 0 else 0.0,
        "gigpo/step_nonzero_frac": float((np.abs(step) > NEGLIGIBLE).mean()),
        "gigpo/sign_change_frac": float((_sign(episode + step) != _sign(episode)).mean()),
    }


def _sign(x: F64) -> npt.NDArray[np.int8]:
    """-1, 0 or +1 per row, with magnitudes below NEGLIGIBLE (float noise) as 0."""
    return (np.sign(x) * (np.abs(x) > NEGLIGIBLE)).astype(np.int8)


def informative(algo: str, cfg: AdvantageConfig, group: Sequence[Trajectory]) -> bool:
    """Whether a group gives any of its steps a nonzero advantage (episode or step term, penalties
    included): what dynamic sampling keeps. Computed alone, as the group's statistics are its own."""
    steps = [s for t in group for s in t.steps]
    return bool(steps) and bool(np.abs(compute_advantages(algo, cfg, steps)[0]).max() > NEGLIGIBLE)


def informative_sample(sample) -> bool:
    """A training sample with some advantage that is not negligible (a NaN counts: the learner then skips
    its non-finite step); `sample.advantage` is one value or one per token (an episode)."""
    values = sample.advantage if isinstance(sample.advantage, list) else [sample.advantage]
    return any(not abs(a) <= NEGLIGIBLE for a in values)
