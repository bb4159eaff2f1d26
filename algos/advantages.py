"""Critic-free advantage estimators: GRPO and GiGPO, over flat per-step arrays.

Rows are steps; the rows of one trajectory are in time order but may be interleaved with other
trajectories' rows (e.g. lockstep collection order). A group is the set of trajectories rolled out
from the same task/seed.

- GRPO (Shao et al., "DeepSeekMath", 2024): episode return R = sum of the trajectory's rewards;
  A^E = R - mean_group(R)  [/ (std_group(R, ddof=1) + 1e-6) for norm="mean_std"].
  Baseline statistics are over trajectories ("trajectory", each counts once, as in the GiGPO
  paper) or over the group's step rows, each carrying its trajectory's R ("step", as verl-agent
  does, so long trajectories weigh more).
- GiGPO (Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training", NeurIPS 2025):
  step return G_t = sum_{k>=t} gamma^(k-t) r_k; anchor group = steps of one group sharing a state
  key (across trajectories and repeated visits); A^S = G_t - mean_anchor(G) [/ (std + 1e-6)];
  A = A^E + omega * A^S. A singleton group (std undefined) uses std 0 and so gets exactly 0.
- scale="batch" (TRL's scale_rewards="batch"): mean_std divides by the std over the whole batch
  instead of the group's; the mean is still the group's.
- penalties (verl-agent's placement of the invalid-action penalty): a per-row p_t subtracted from
  that row's own scores only, after the returns are formed: its episode score R_i - p_t and its
  step return G_t - p_t. The statistics pool the penalised row scores, so this placement needs the
  "step" baseline (a trajectory pool would hold no penalty, and mean_std would divide a penalty by
  a zero std). The other placement puts p_t into r_t before anything is computed (the caller's).
- RLOO (Ahmadian et al., "Back to Basics", 2024): A_i = R_i - mean_{j != i} R_j over the
  trajectories of the group, = G/(G-1) (R_i - mean_group(R)); a singleton group gets 0.
- similarity_keys: anchor ids for envs without a canonical state (GiGPO's similarity mode):
  within a group, a step joins the first earlier cluster whose text is similar enough.
- From a batch's step records to these arrays, and the batch's advantage statistics: algos/credit.py.

Everything is computed in float64 and returned as float32. Measured on this machine (2 CPUs,
numpy 2.4): gigpo_advantages on 10^6 rows (10^5 trajectories of 1-19 steps, lockstep order, str
state keys, mean_std) takes ~0.3-0.4 s, of which discounted_returns ~0.08 s and the str-key
factorisation ~0.2 s. The return scan loops over time steps, vectorised across trajectories, so it
grows with the longest trajectory (10^6 rows as 100 trajectories of 10^4 steps: ~0.1 s).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from envs.base import at_least, choose

_EPS = 1e-6
_NORMS = ("mean", "mean_std")
_BASELINES = ("trajectory", "step")
_SCALES = ("group", "batch")

ALGOS = ("grpo", "gigpo", "rloo")
PLACEMENTS = ("return", "step")
PAPER_BASELINE = "trajectory"  # the estimators' own default: the paper's per-trajectory group statistics
# The flags of the defaults before the no-harm measurements (docs/benchmarks.md, "No harm"): the penalty
# inside the returns, per-trajectory statistics. Their rows differ where today's score alike (a cold model
# that refuses every action), and the presets measured under them name them so that their runs reproduce.
RETURN_PLACEMENT = ("--penalty-placement", "return", "--episode-baseline", PAPER_BASELINE)
ANCHORS = ("state_key", "similarity")
STEP_PLACEMENT = ("--penalty-placement step charges each step its own penalty inside the group's step-row "
                  "statistics: use it with --episode-baseline step and --algo gigpo or grpo")  # fmt: skip


@dataclass(frozen=True)
class AdvantageConfig:
    """-- advantages --"""

    gamma: float = 0.95
    """Discount of the step returns (GiGPO's step-level term)."""
    omega: float = 1.0
    """Weight of the step-level advantage in GiGPO."""
    norm: str = "mean_std"
    """mean (subtract the group mean) or mean_std (also divide by the group std)."""
    episode_baseline: str = "step"
    """Group statistics over trajectories (the paper) or over step rows (verl-agent): over rows a group's
    advantages sum to 0, where per trajectory a penalised episode's extra rows push a batch net-negative."""
    scale: str = "group"
    """With norm=mean_std, divide by the group's std or the whole batch's (TRL: scale_rewards)."""
    anchor: str = "state_key"
    """GiGPO anchor states: env's info["state_key"], or similarity of observation texts."""
    similarity_threshold: float = 0.9
    """anchor=similarity: observations with difflib ratio >= this share an anchor state."""
    invalid_penalty: float = 0.1
    """Charged to a step whose action is unparseable or rejected (where: penalty_placement)."""
    penalty_placement: str = "auto"
    """return: the penalty is taken off the step's reward, so it enters the episode return and every earlier
    step's discounted return; step: only off the faulty step's own episode score and step return, after
    the returns are formed (verl-agent's way; needs episode_baseline=step); auto: step where it can be
    (episode_baseline=step, algo gigpo or grpo), else return."""

    def check(self) -> None:
        """The section's own values (penalty placement against --algo: algos/validate.py). Raises ValueError."""
        for name, allowed in (("norm", _NORMS), ("episode_baseline", _BASELINES), ("penalty_placement", ("auto", *PLACEMENTS)),
                              ("scale", _SCALES), ("anchor", ANCHORS)):  # fmt: skip
            choose(name, getattr(self, name), allowed)
        if self.penalty_placement == "step" and self.invalid_penalty and self.episode_baseline != "step":
            raise ValueError(STEP_PLACEMENT)
        if not 0.0 < self.similarity_threshold <= 1.0:
            raise ValueError(f"similarity_threshold must be in (0, 1] (got {self.similarity_threshold})")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1] (got {self.gamma})")
        at_least("invalid_penalty", self.invalid_penalty, 0)


def penalty_placement(cfg: AdvantageConfig, algo: str) -> str:
    """Where `cfg` puts the invalid-action penalty under --algo `algo`: its own placement, or for auto
    the faulty step's own scores wherever the group statistics are over step rows (GiGPO and GRPO with
    episode_baseline=step; RLOO has no step rows to charge), else inside the returns."""
    if cfg.penalty_placement != "auto":
        return cfg.penalty_placement
    return "step" if cfg.episode_baseline == "step" and algo in ("gigpo", "grpo") else "return"


F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def _check_options(norm: str, episode_baseline: str, gamma: float | None, scale: str) -> None:
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {_SCALES}, got {scale!r}")
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    if episode_baseline not in _BASELINES:
        raise ValueError(f"episode_baseline must be one of {_BASELINES}, got {episode_baseline!r}")
    if gamma is not None and not 0.0 <= gamma <= 1.0:  # also rejects NaN
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")


def _as_1d(name: str, x: npt.ArrayLike, dtype: npt.DTypeLike = None) -> np.ndarray:
    arr = np.asarray(x, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr


def _check_lengths(**arrays: Sequence[object] | np.ndarray) -> int:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"all inputs must have the same length, got {lengths}")
    return next(iter(lengths.values()))


def _factorize(x: np.ndarray) -> tuple[I64, int]:
    """Dense codes 0..K-1 for the distinct values of x, and K."""
    uniq, inv = np.unique(x, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(uniq)


def _normalize(values: F64, inv: I64, n_groups: int, norm: str, scale: str) -> F64:
    """Subtract the group mean (and divide by unbiased std + eps for mean_std), per group;
    scale="batch" divides by the unbiased std of all values instead."""
    counts = np.bincount(inv, minlength=n_groups)  # [K]
    mean = np.bincount(inv, weights=values, minlength=n_groups) / np.maximum(counts, 1)
    dev = values - mean[inv]  # [M]; exactly 0 for singletons since mean == value
    if norm == "mean":
        return dev
    if scale == "batch":
        std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        return dev / (std + _EPS)
    ss = np.bincount(inv, weights=dev * dev, minlength=n_groups)  # [K]
    var = np.where(counts > 1, ss / np.maximum(counts - 1, 1), 0.0)  # singleton: std := 0
    return dev / (np.sqrt(var)[inv] + _EPS)


def _traj_structure(traj_ids: np.ndarray, group_ids: np.ndarray) -> tuple[I64, I64, I64, int]:
    """Trajectory codes per row, group codes per row and per trajectory, number of groups."""
    t_inv, n_traj = _factorize(traj_ids)  # [N]
    g_inv, n_groups = _factorize(group_ids)  # [N]
    g_of_traj = np.zeros(n_traj, dtype=np.int64)  # [T]
    g_of_traj[t_inv] = g_inv  # any row's group; checked for consistency below
    bad = g_of_traj[t_inv] != g_inv
    if bad.any():
        tid = traj_ids[np.flatnonzero(bad)[0]]
        raise ValueError(f"trajectory {tid!r} spans more than one group_id")
    return t_inv, g_inv, g_of_traj, n_groups


def _episode_adv(
    rewards: F64,
    t_inv: I64,
    g_inv: I64,
    g_of_traj: I64,
    n_groups: int,
    norm: str,
    baseline: str,
    scale: str,
    penalties: F64 | None,
) -> F64:
    returns = np.bincount(t_inv, weights=rewards, minlength=len(g_of_traj))  # [T]
    if baseline == "trajectory":
        return _normalize(returns, g_of_traj, n_groups, norm, scale)[t_inv]  # [N]
    scores = returns[t_inv] if penalties is None else returns[t_inv] - penalties  # [N] each row's own score
    return _normalize(scores, g_inv, n_groups, norm, scale)  # [N], stats over rows


def _penalties(penalties: npt.ArrayLike | None, n: int, episode_baseline: str) -> F64 | None:
    if penalties is None:
        return None
    p = _as_1d("penalties", penalties, np.float64)
    if len(p) != n:
        raise ValueError(f"penalties must have one value per row ({n}), got {len(p)}")
    if episode_baseline != "step":
        raise ValueError("per-row penalties need episode_baseline='step' (their scores join the group's pool)")
    return p


def discounted_returns(rewards: npt.ArrayLike, traj_ids: npt.ArrayLike, gamma: float) -> F32:
    """Step returns G_t = sum_{k>=t} gamma^(k-t) r_k within each trajectory, float32 [N]."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    r = _as_1d("rewards", rewards, np.float64)
    tids = _as_1d("traj_ids", traj_ids)
    _check_lengths(rewards=r, traj_ids=tids)
    return _discounted(r, _factorize(tids)[0], gamma).astype(np.float32)


def _discounted(r: F64, t_inv: I64, gamma: float) -> F64:
    n = len(r)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    order = np.argsort(t_inv, kind="stable")  # [N] rows by (traj, position)
    t_s, r_s = t_inv[order], r[order]
    new_traj = np.r_[True, t_s[1:] != t_s[:-1]]  # [N]
    starts = np.flatnonzero(new_traj)
    pos = np.arange(n) - starts[np.cumsum(new_traj) - 1]  # [N] position within trajectory
    has_next = np.r_[~new_traj[1:], False]  # [N] next sorted row is the same trajectory
    by_pos = np.argsort(pos, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(pos))]
    g_s = np.zeros(n + 1, dtype=np.float64)  # +1 pad so idx + 1 is always valid
    # Reverse scan over positions, vectorised across all trajectories with that many steps.
    for p in range(len(bounds) - 2, -1, -1):
        idx = by_pos[bounds[p] : bounds[p + 1]]
        g_s[idx] = r_s[idx] + gamma * np.where(has_next[idx], g_s[idx + 1], 0.0)
    out = np.empty(n, dtype=np.float64)
    out[order] = g_s[:n]
    return out


def _anchor_codes(group_ids: np.ndarray, state_keys: Sequence[Hashable]) -> tuple[I64, int]:
    codes: dict[Hashable, int] = {}
    k = np.fromiter((codes.setdefault(s, len(codes)) for s in state_keys), np.int64, len(group_ids))
    g_inv, _ = _factorize(group_ids)
    # Pairs (group, key) -> one int64; keys never join across groups.
    return _factorize(g_inv * max(len(codes), 1) + k)


def anchor_group_sizes(group_ids: npt.ArrayLike, state_keys: Sequence[Hashable]) -> I64:
    """Per row, the size of its anchor group (same group_id and state_key), int64 [N]."""
    gids = _as_1d("group_ids", group_ids)
    _check_lengths(group_ids=gids, state_keys=state_keys)
    if len(gids) == 0:
        return np.zeros(0, dtype=np.int64)
    a_inv, n_anchor = _anchor_codes(gids, state_keys)
    return np.bincount(a_inv, minlength=n_anchor)[a_inv].astype(np.int64)


def grpo_advantages(
    rewards: npt.ArrayLike,
    traj_ids: npt.ArrayLike,
    group_ids: npt.ArrayLike,
    *,
    norm: str = AdvantageConfig.norm,
    episode_baseline: str = PAPER_BASELINE,
    scale: str = AdvantageConfig.scale,
    penalties: npt.ArrayLike | None = None,
) -> F32:
    """GRPO episode-level advantage, broadcast to every step row, float32 [N]. `penalties`: per-row
    amounts taken off each row's own score (module docstring; needs the step baseline)."""
    _check_options(norm, episode_baseline, None, scale)
    r = _as_1d("rewards", rewards, np.float64)
    tids, gids = _as_1d("traj_ids", traj_ids), _as_1d("group_ids", group_ids)
    n = _check_lengths(rewards=r, traj_ids=tids, group_ids=gids)
    p = _penalties(penalties, n, episode_baseline)
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    t_inv, g_inv, g_of_traj, n_groups = _traj_structure(tids, gids)
    adv = _episode_adv(r, t_inv, g_inv, g_of_traj, n_groups, norm, episode_baseline, scale, p)
    return adv.astype(np.float32)


def rloo_advantages(rewards: npt.ArrayLike, traj_ids: npt.ArrayLike, group_ids: npt.ArrayLike) -> F32:
    """RLOO: R_i minus the mean return of the other trajectories of its group, float32 [N]."""
    r = _as_1d("rewards", rewards, np.float64)
    tids, gids = _as_1d("traj_ids", traj_ids), _as_1d("group_ids", group_ids)
    if _check_lengths(rewards=r, traj_ids=tids, group_ids=gids) == 0:
        return np.zeros(0, dtype=np.float32)
    t_inv, _, g_of_traj, n_groups = _traj_structure(tids, gids)
    returns = np.bincount(t_inv, weights=r, minlength=len(g_of_traj))  # [T]
    counts = np.bincount(g_of_traj, minlength=n_groups)[g_of_traj]  # [T] trajectories in the group
    totals = np.bincount(g_of_traj, weights=returns, minlength=n_groups)[g_of_traj]  # [T]
    others = (totals - returns) / np.maximum(counts - 1, 1)  # mean of the other G-1 returns
    adv = np.where(counts > 1, returns - others, 0.0)  # [T]
    return adv[t_inv].astype(np.float32)


def gigpo_advantages(
    rewards: npt.ArrayLike,
    traj_ids: npt.ArrayLike,
    group_ids: npt.ArrayLike,
    state_keys: Sequence[Hashable],
    *,
    gamma: float = AdvantageConfig.gamma,
    omega: float = AdvantageConfig.omega,
    norm: str = AdvantageConfig.norm,
    episode_baseline: str = PAPER_BASELINE,
    scale: str = AdvantageConfig.scale,
    penalties: npt.ArrayLike | None = None,
) -> F32:
    """GiGPO advantage: episode term + omega * anchor-state step term, float32 [N].
    `scale` applies to the episode term; the step term is always scaled within its anchor group.
    `penalties`: per-row amounts taken off each row's own episode score and step return (module
    docstring; needs the step baseline)."""
    ep, step = gigpo_terms(rewards, traj_ids, group_ids, state_keys, gamma=gamma, norm=norm,
                           episode_baseline=episode_baseline, scale=scale, penalties=penalties)  # fmt: skip
    return (ep + omega * step).astype(np.float32)


def gigpo_terms(
    rewards: npt.ArrayLike,
    traj_ids: npt.ArrayLike,
    group_ids: npt.ArrayLike,
    state_keys: Sequence[Hashable],
    *,
    gamma: float = AdvantageConfig.gamma,
    norm: str = AdvantageConfig.norm,
    episode_baseline: str = PAPER_BASELINE,
    scale: str = AdvantageConfig.scale,
    penalties: npt.ArrayLike | None = None,
) -> tuple[F64, F64]:
    """GiGPO's two terms apart, float64 [N] each: (episode term, step term before omega)."""
    _check_options(norm, episode_baseline, gamma, scale)
    r = _as_1d("rewards", rewards, np.float64)
    tids, gids = _as_1d("traj_ids", traj_ids), _as_1d("group_ids", group_ids)
    n = _check_lengths(rewards=r, traj_ids=tids, group_ids=gids, state_keys=state_keys)
    p = _penalties(penalties, n, episode_baseline)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    t_inv, g_inv, g_of_traj, n_groups = _traj_structure(tids, gids)
    ep = _episode_adv(r, t_inv, g_inv, g_of_traj, n_groups, norm, episode_baseline, scale, p)  # [N]
    step_ret = _discounted(r, t_inv, gamma)  # [N]
    if p is not None:
        step_ret = step_ret - p
    a_inv, n_anchor = _anchor_codes(gids, state_keys)  # [N]
    return ep, _normalize(step_ret, a_inv, n_anchor, norm, "group")  # the step term always within its anchor group


def similarity_keys(group_ids: npt.ArrayLike, texts: Sequence[str], threshold: float = AdvantageConfig.similarity_threshold) -> I64:
    """Anchor ids from observation text, for envs without a canonical state, int64 [N].

    Rows are visited in order; within its group a row joins the first cluster whose first
    text has difflib similarity ratio >= threshold, else it starts a new cluster. Equal texts
    always share a cluster; clusters never span groups. threshold=1.0 is exact text match.
    """
    from difflib import SequenceMatcher

    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    gids = _as_1d("group_ids", group_ids)
    _check_lengths(group_ids=gids, texts=texts)
    out = np.empty(len(gids), dtype=np.int64)
    exact: dict[tuple, int] = {}
    reps: dict[Hashable, list[tuple[str, int]]] = {}  # group -> [(representative text, cluster id)]
    n_clusters = 0
    for i, (g, text) in enumerate(zip(gids.tolist(), texts)):
        cid = exact.get((g, text))
        if cid is None:
            for rep, rep_id in reps.setdefault(g, []):
                m = SequenceMatcher(None, rep, text, autojunk=False)
                if m.real_quick_ratio() >= threshold and m.quick_ratio() >= threshold and m.ratio() >= threshold:
                    cid = rep_id
                    break
            if cid is None:
                cid, n_clusters = n_clusters, n_clusters + 1
                reps[g].append((text, cid))
            exact[(g, text)] = cid
        out[i] = cid
    return out
