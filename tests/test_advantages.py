"""Tests for algos/advantages.py: hand-computed GRPO/GiGPO values and a row-order property."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algos.advantages import (
    AdvantageConfig,
    anchor_group_sizes,
    discounted_returns,
    gigpo_advantages,
    gigpo_terms,
    grpo_advantages,
    penalty_placement,
    rloo_advantages,
    similarity_keys,
)
from algos.credit import step_signal


def close(actual: np.ndarray, expected: list[float], tol: float = 1e-6) -> None:
    np.testing.assert_allclose(actual, np.array(expected), rtol=tol, atol=tol)


# --- GRPO --------------------------------------------------------------------------------------

# Group of 3 trajectories: t0 = [0, 1] (R=1), t1 = [0, 0] (R=0), t2 = [0] (R=0).
R3 = [0.0, 1.0, 0.0, 0.0, 0.0]
T3 = [0, 0, 1, 1, 2]
G3 = [7, 7, 7, 7, 7]


def test_grpo_mean_std_group_of_three() -> None:
    # Returns 1, 0, 0: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3).
    # (2/3) / (sqrt(1/3) + 1e-6) = 1.1546985...; (-1/3) / (sqrt(1/3) + 1e-6) = -0.5773492...
    hi, lo = 1.1546985383827155, -0.5773492691913578
    close(grpo_advantages(R3, T3, G3, norm="mean_std"), [hi, hi, lo, lo, lo])
    close(grpo_advantages(R3, T3, G3), [hi, hi, lo, lo, lo])  # mean_std is GRPO's default


def test_grpo_mean_group_of_three() -> None:
    third = 1 / 3
    close(grpo_advantages(R3, T3, G3, norm="mean"), [2 * third] * 2 + [-third] * 3)


def test_grpo_two_groups_independent_and_interleaved() -> None:
    # Group 0: returns 1, 3 -> mean 2 -> -1, +1.
    # Group 1: returns 10, 10, 16 -> mean 12 -> -2, -2, +4.
    rewards = [1.0, 10.0, 1.0, 10.0, 2.0, 16.0, 0.0]
    traj = [0, 2, 1, 3, 1, 4, 0]
    group = [0, 1, 0, 1, 0, 1, 0]
    close(grpo_advantages(rewards, traj, group, norm="mean"), [-1, -2, 1, -2, 1, 4, -1])


def test_grpo_group_of_two_mean_std() -> None:
    # Returns 1, 0: mean 0.5, unbiased std sqrt(0.5); 0.5 / (sqrt(0.5) + 1e-6) = 0.70710578...
    a = 0.7071057811879616
    close(grpo_advantages([1.0, 0.0], [5, 6], [0, 0]), [a, -a])


def test_single_trajectory_group_gets_zero() -> None:
    close(grpo_advantages([3.0, 4.0], [0, 0], [0, 0]), [0.0, 0.0])
    close(grpo_advantages([3.0], [0], [0], episode_baseline="step"), [0.0])


def test_all_equal_rewards_give_zeros() -> None:
    rewards = [0.1] * 6
    traj = [0, 0, 1, 1, 2, 2]
    group = [0] * 6
    keys = ["a", "b", "a", "b", "a", "b"]
    for norm in ("mean", "mean_std"):
        for base in ("trajectory", "step"):
            close(grpo_advantages(rewards, traj, group, norm=norm, episode_baseline=base), [0] * 6)
            out = gigpo_advantages(rewards, traj, group, keys, norm=norm, episode_baseline=base)
            close(out, [0] * 6)


def test_episode_baseline_step_vs_trajectory() -> None:
    # Trajectory A = [0, 0, 1] (R=1, 3 rows), B = [0] (R=0, 1 row).
    rewards, traj, group = [0.0, 0.0, 1.0, 0.0], [0, 0, 0, 1], [0, 0, 0, 0]
    # "trajectory": mean of {1, 0} = 0.5 -> A +0.5, B -0.5.
    close(grpo_advantages(rewards, traj, group, norm="mean"), [0.5, 0.5, 0.5, -0.5])
    # "step": mean of rows {1, 1, 1, 0} = 0.75 -> A +0.25, B -0.75.
    out = grpo_advantages(rewards, traj, group, norm="mean", episode_baseline="step")
    close(out, [0.25, 0.25, 0.25, -0.75])
    # "step" + mean_std: row std (ddof=1) = sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5.
    out = grpo_advantages(rewards, traj, group, episode_baseline="step")
    close(out, [0.499999000002] * 3 + [-1.499997000006])
    # "trajectory" + mean_std: std of {1, 0} = sqrt(0.5).
    a = 0.7071057811879616
    close(grpo_advantages(rewards, traj, group), [a, a, a, -a])


# --- discounted returns ------------------------------------------------------------------------


def test_discounted_returns() -> None:
    close(discounted_returns([0.0, 0.0, 1.0], [0, 0, 0], 0.9), [0.81, 0.9, 1.0])
    # Interleaved: traj 0 = [0, 0, 1], traj 1 = [2, 4].
    out = discounted_returns([0.0, 2.0, 0.0, 4.0, 1.0], [0, 1, 0, 1, 0], 0.5)
    close(out, [0.25, 4.0, 0.5, 4.0, 1.0])
    close(discounted_returns([1.0, 2.0, 3.0], [0, 0, 0], 0.0), [1, 2, 3])
    close(discounted_returns([1.0, 2.0, 3.0], [0, 0, 0], 1.0), [6, 5, 3])
    assert discounted_returns([1.0], [0], 0.9).dtype == np.float32


# --- GiGPO -------------------------------------------------------------------------------------

# gamma = 0.5. A: states a b c d, rewards 0 0 0 1 -> G = 0.125 0.25 0.5 1, R = 1.
#              B: states b e,     rewards 0 2     -> G = 1 2,               R = 2.
# Episode ("mean"): mean R 1.5 -> A -0.5, B +0.5.
# Anchor b: G 0.25 (A, t=1) and 1 (B, t=0) -> mean 0.625 -> -0.375, +0.375; the rest are singletons.
RA = [0.0, 0.0, 0.0, 1.0, 0.0, 2.0]
TA = [0, 0, 0, 0, 1, 1]
GA = [0] * 6
KA = ["a", "b", "c", "d", "b", "e"]


def test_gigpo_shared_anchor_hand_computed() -> None:
    out = gigpo_advantages(RA, TA, GA, KA, gamma=0.5, norm="mean")
    close(out, [-0.5, -0.875, -0.5, -0.5, 0.875, 0.5])
    assert out.dtype == np.float32
    # mean_std: episode std of {1, 2} = sqrt(0.5) -> +-0.5 / (sqrt(0.5) + 1e-6) = +-0.70710578;
    # anchor b std of {0.25, 1} = 0.75 / sqrt(2) -> +-0.375 / (0.53033 + 1e-6) = +-0.70710545.
    e, s = 0.7071057811879616, 0.7071054478557284
    out = gigpo_advantages(RA, TA, GA, KA, gamma=0.5, norm="mean_std")
    close(out, [-e, -e - s, -e, -e, e + s, e])
    np.testing.assert_array_equal(anchor_group_sizes(GA, KA), [1, 2, 1, 1, 2, 1])


def test_gigpo_omega_scaling() -> None:
    close(gigpo_advantages(RA, TA, GA, KA, gamma=0.5, omega=2.0, norm="mean"), [-0.5, -1.25, -0.5, -0.5, 1.25, 0.5])
    close(gigpo_advantages(RA, TA, GA, KA, gamma=0.5, omega=0.0, norm="mean"), [-0.5] * 4 + [0.5] * 2)
    for norm in ("mean", "mean_std"):
        base = grpo_advantages(RA, TA, GA, norm=norm)
        out = gigpo_advantages(RA, TA, GA, KA, gamma=0.5, omega=0.0, norm=norm)
        np.testing.assert_array_equal(out, base)


def test_step_signal_hand_computed() -> None:
    # norm=mean: episode term -0.5 x 4, +0.5 x 2 (sum of magnitudes 3); step term 0.375 on the two rows
    # of anchor b (0.75), 0 elsewhere. Share 0.75 / 3.75 = 0.2; with omega 2: 1.5 / 4.5 = 1/3.
    ep, step = gigpo_terms(RA, TA, GA, KA, gamma=0.5, norm="mean")
    close(ep, [-0.5] * 4 + [0.5] * 2)
    close(step, [0.0, -0.375, 0.0, 0.0, 0.375, 0.0])
    # the step term agrees with the episode term on both rows it touches: no sign changes
    assert step_signal(ep, step) == pytest.approx(
        {"gigpo/step_share": 0.2, "gigpo/step_nonzero_frac": 1 / 3, "gigpo/sign_change_frac": 0.0}
    )
    assert step_signal(ep, 2 * step)["gigpo/step_share"] == pytest.approx(1 / 3)
    zero = {"gigpo/step_share": 0.0, "gigpo/step_nonzero_frac": 0.0, "gigpo/sign_change_frac": 0.0}
    assert step_signal(np.zeros(3), np.zeros(3)) == zero
    assert step_signal(np.zeros(0), np.zeros(0)) == zero


def test_sign_changes_hand_computed() -> None:
    # sums -1, -0.5, 0.3, 0.5, 1e-9: row 0 overruled (+ to -), row 2 directed (0 to +); row 1 keeps its
    # sign, row 3 has no step term, row 4's sum is float noise around 0 like its episode term
    ep = np.array([1.0, -1.0, 0.0, 0.5, 0.0])
    step = np.array([-2.0, 0.5, 0.3, 0.0, 1e-9])
    assert step_signal(ep, step)["gigpo/sign_change_frac"] == pytest.approx(2 / 5)


def test_step_nonzero_frac_counts_float_noise_as_zero_like_the_sign_test() -> None:
    # rows 0-2 carry a step term; rows 3 and 4 hold float noise (1e-8, -5e-7, both below NEGLIGIBLE)
    # and count as 0 in both fractions: 3 of 5 rows are touched, and no sign changes
    ep = np.array([1.0, -1.0, 0.5, 0.0, 0.0])
    step = np.array([0.5, -0.25, 1e-3, 1e-8, -5e-7])
    signal = step_signal(ep, step)
    assert signal["gigpo/step_nonzero_frac"] == pytest.approx(3 / 5)
    assert signal["gigpo/sign_change_frac"] == 0.0


def test_singleton_anchors_have_zero_step_advantage() -> None:
    keys = ["k0", "k1", "k2", "k3", "k4", "k5"]  # every step its own anchor group
    for norm in ("mean", "mean_std"):
        out = gigpo_advantages(RA, TA, GA, keys, gamma=0.5, omega=3.0, norm=norm)
        np.testing.assert_array_equal(out, grpo_advantages(RA, TA, GA, norm=norm))
    assert (anchor_group_sizes(GA, keys) == 1).all()


def test_repeated_visits_join_one_anchor() -> None:
    # One trajectory, states a b a, rewards 1 0 0, gamma 0.5 -> G = 1 0 0. Anchor a: {1, 0},
    # mean 0.5 -> +0.5, -0.5; b is a singleton; the lone trajectory's episode term is 0.
    out = gigpo_advantages([1.0, 0.0, 0.0], [0, 0, 0], [0, 0, 0], ["a", "b", "a"], gamma=0.5, norm="mean")
    close(out, [0.5, 0.0, -0.5])
    np.testing.assert_array_equal(anchor_group_sizes([0, 0, 0], ["a", "b", "a"]), [2, 1, 2])


def test_same_key_in_different_groups_does_not_join() -> None:
    # If "s" joined across groups the step terms would be +-0.5; each group has one trajectory.
    out = gigpo_advantages([1.0, 0.0], [0, 1], [0, 1], ["s", "s"], gamma=0.5, norm="mean")
    close(out, [0.0, 0.0])
    np.testing.assert_array_equal(anchor_group_sizes([0, 1], ["s", "s"]), [1, 1])


# --- validation, dtype, empty ------------------------------------------------------------------


def test_empty_input() -> None:
    for out in (
        gigpo_advantages([], [], [], [], norm="mean"),
        grpo_advantages([], [], []),
        discounted_returns([], [], 0.9),
    ):
        assert out.dtype == np.float32 and out.shape == (0,)
    assert anchor_group_sizes([], []).shape == (0,)


def test_validation_errors() -> None:
    with pytest.raises(ValueError, match="same length"):
        gigpo_advantages([1.0, 2.0], [0, 0], [0, 0], ["a"], norm="mean")
    with pytest.raises(ValueError, match="same length"):
        grpo_advantages([1.0], [0, 0], [0, 0])
    with pytest.raises(ValueError, match="same length"):
        discounted_returns([1.0], [0, 0], 0.9)
    with pytest.raises(ValueError, match="same length"):
        anchor_group_sizes([0, 0], ["a"])
    with pytest.raises(ValueError, match="mean_std"):
        gigpo_advantages([1.0], [0], [0], ["a"], norm="std")
    with pytest.raises(ValueError, match="'trajectory', 'step'"):
        grpo_advantages([1.0], [0], [0], episode_baseline="row")
    for gamma in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="gamma"):
            gigpo_advantages([1.0], [0], [0], ["a"], gamma=gamma, norm="mean")
        with pytest.raises(ValueError, match="gamma"):
            discounted_returns([1.0], [0], gamma)
    with pytest.raises(ValueError, match="more than one group"):
        grpo_advantages([1.0, 2.0], [3, 3], [0, 1])
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages([[1.0]], [0], [0])


# --- row order property ------------------------------------------------------------------------


def reference_gigpo(
    rewards: list[float],
    traj: list[int],
    group: list[int],
    keys: list[str],
    gamma: float,
    norm: str,
    base: str,
) -> np.ndarray:
    """Slow, literal transcription of the contract (per-row Python loops)."""

    def stats(vals: list[float]) -> tuple[float, float]:
        m = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0
        return m, sd

    def norm_adv(v: float, vals: list[float]) -> float:
        m, sd = stats(vals)
        return v - m if norm == "mean" else (v - m) / (sd + 1e-6)

    rows: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(traj):
        rows[t].append(i)
    ret = {t: sum(rewards[i] for i in ix) for t, ix in rows.items()}
    g_ret = [0.0] * len(rewards)
    for ix in rows.values():
        acc = 0.0
        for i in reversed(ix):
            acc = rewards[i] + gamma * acc
            g_ret[i] = acc
    out = []
    for i in range(len(rewards)):
        same = [t for t in rows if group[rows[t][0]] == group[i]]
        pool = (
            [ret[t] for t in same]
            if base == "trajectory"
            else [ret[traj[j]] for j in range(len(traj)) if group[j] == group[i]]
        )
        anchor = [g_ret[j] for j in range(len(keys)) if group[j] == group[i] and keys[j] == keys[i]]
        out.append(norm_adv(ret[traj[i]], pool) + norm_adv(g_ret[i], anchor))
    return np.array(out)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list, list, list, list, list[int]]:
    n_traj = draw(st.integers(1, 6))
    rewards, traj, group, keys = [], [], [], []
    for t in range(n_traj):
        g = draw(st.integers(0, 2))
        for _ in range(draw(st.integers(1, 5))):
            rewards.append(draw(st.sampled_from([0.0, 0.5, 1.0, -1.0])))
            traj.append(10 * t + 3)
            group.append(g)
            keys.append(draw(st.sampled_from("abc")))
    # Random interleaving that keeps each trajectory's rows in order: take a random permutation
    # and let the k-th appearance of trajectory t stand for t's k-th row.
    perm = draw(st.permutations(range(len(traj))))
    firsts = {t: traj.index(t) for t in set(traj)}
    seen: dict[int, int] = defaultdict(int)
    order = []
    for p in perm:
        t = traj[p]
        order.append(firsts[t] + seen[t])
        seen[t] += 1
    return rewards, traj, group, keys, order


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(["mean", "mean_std"]), st.sampled_from(["trajectory", "step"]))
def test_interleaved_rows_permute_output(batch: tuple, norm: str, base: str) -> None:
    rewards, traj, group, keys, order = batch
    r, t, g = np.array(rewards), np.array(traj), np.array(group)
    k = np.array(keys, dtype=object)
    contiguous = gigpo_advantages(r, t, g, keys, gamma=0.5, norm=norm, episode_baseline=base)
    ref = reference_gigpo(rewards, traj, group, keys, 0.5, norm, base)
    np.testing.assert_allclose(contiguous, ref, rtol=1e-5, atol=1e-5)
    o = np.array(order)
    shuffled = gigpo_advantages(r[o], t[o], g[o], list(k[o]), gamma=0.5, norm=norm, episode_baseline=base)
    np.testing.assert_allclose(shuffled, contiguous[o], rtol=1e-5, atol=1e-5)
    ep = grpo_advantages(r[o], t[o], g[o], norm=norm, episode_baseline=base)
    np.testing.assert_allclose(ep, grpo_advantages(r, t, g, norm=norm, episode_baseline=base)[o])
    np.testing.assert_allclose(discounted_returns(r[o], t[o], 0.5), discounted_returns(r, t, 0.5)[o])
    np.testing.assert_array_equal(anchor_group_sizes(g[o], list(k[o])), anchor_group_sizes(g, keys)[o])


# --- batch scaling, RLOO, similarity anchors -----------------------------------------------------


def test_grpo_batch_scale_uses_the_batch_std_and_the_group_mean() -> None:
    # Returns: group 0 -> 1, 0; group 1 -> 3, 3. Group means 0.5 and 3 -> deviations .5, -.5, 0, 0.
    # Batch std of (1, 0, 3, 3): mean 1.75, squares .5625 + 3.0625 + 1.5625 + 1.5625 = 6.75, /3 -> 1.5.
    a = 0.5 / (1.5 + 1e-6)
    close(grpo_advantages([1.0, 0.0, 3.0, 3.0], [0, 1, 2, 3], [0, 0, 1, 1], scale="batch"), [a, -a, 0, 0])
    # The group scale leaves the all-equal group at 0 too, but scales group 0 by its own std.
    g = 0.5 / (math.sqrt(0.5) + 1e-6)
    close(grpo_advantages([1.0, 0.0, 3.0, 3.0], [0, 1, 2, 3], [0, 0, 1, 1]), [g, -g, 0, 0])


def test_rloo_hand_computed() -> None:
    # Group of 3 (R3: returns 1, 0, 0): 1 - (0+0)/2 = 1; 0 - (1+0)/2 = -0.5 on both rows of t1 and on t2.
    close(rloo_advantages(R3, T3, G3), [1, 1, -0.5, -0.5, -0.5])
    close(rloo_advantages([1.0, 0.0], [0, 1], [0, 0]), [1, -1])  # group of 2: the other one is the baseline
    close(rloo_advantages([5.0], [0], [0]), [0])  # singleton group: no baseline, no signal
    close(rloo_advantages([2.0, 2.0, 2.0], [0, 1, 2], [0, 0, 0]), [0, 0, 0])  # all equal


def test_similarity_keys_cluster_near_duplicates_within_groups() -> None:
    texts = [
        "You are in the hall. Exits: north, east.",
        "You are in the hall. Exits: north, east!",  # one character differs: ratio ~0.98
        "You are in the kitchen. A stove.",
        "You are in the hall. Exits: north, east.",  # the first text again, other group
    ]
    keys = similarity_keys([0, 0, 0, 1], texts, threshold=0.9)
    assert keys[0] == keys[1] != keys[2] and keys[3] not in keys[:3]
    exact = similarity_keys([0, 0, 0, 1], texts, threshold=1.0)
    assert len(set(exact.tolist())) == 4
    with pytest.raises(ValueError, match="threshold"):
        similarity_keys([0], ["x"], threshold=0.0)


@st.composite
def episode_groups(draw: st.DrawFn) -> tuple[list, list, list]:
    """One-step trajectories, so a reward shift is a return shift."""
    rewards, traj, group = [], [], []
    for g in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 5))):
            rewards.append(draw(st.floats(-3, 3, allow_nan=False).map(lambda x: round(x, 2))))
            traj.append(len(traj))
            group.append(g)
    return rewards, traj, group


@settings(max_examples=60, deadline=None)
@given(episode_groups(), st.floats(-5, 5, allow_nan=False), st.sampled_from(["group", "batch"]))
def test_advantage_invariants(batch: tuple, shift: float, scale: str) -> None:
    rewards, traj, group = batch
    r, t, g = np.array(rewards), np.array(traj), np.array(group)
    mean_adv = grpo_advantages(r, t, g, norm="mean")
    for gid in set(group):  # mean-normalised advantages sum to zero per group
        assert abs(mean_adv[g == gid].sum()) < 1e-4
    shifted = np.where(g == g[0], r + shift, r)  # shift every reward of one group
    for norm in ("mean", "mean_std"):
        np.testing.assert_allclose(
            grpo_advantages(shifted, t, g, norm=norm), grpo_advantages(r, t, g, norm=norm), atol=1e-3
        )
    np.testing.assert_allclose(rloo_advantages(shifted, t, g), rloo_advantages(r, t, g), atol=1e-4)
    # RLOO = G/(G-1) x the mean-normalised GRPO advantage, group by group
    sizes = np.bincount(g)[g]
    expected = np.where(sizes > 1, sizes / np.maximum(sizes - 1, 1) * mean_adv, 0.0)
    np.testing.assert_allclose(rloo_advantages(r, t, g), expected, atol=1e-4)
    # GiGPO with no repeated anchor is GRPO (every step term is 0)
    unique = [f"s{i}" for i in range(len(r))]
    for norm in ("mean", "mean_std"):
        np.testing.assert_allclose(
            gigpo_advantages(r, t, g, unique, norm=norm, scale=scale), grpo_advantages(r, t, g, norm=norm, scale=scale)
        )


# --- where the invalid-action penalty goes -----------------------------------------------
# One group, two trajectories of two steps, gamma 0.5, norm "mean", penalty 0.1 on the first step of
# trajectory 0: traj 0 = a (invalid, r 0) -> b (r 1), traj 1 = a (r 0) -> c (r 0).
PEN_TRAJ, PEN_GROUP, PEN_KEYS = [0, 0, 1, 1], [0, 0, 0, 0], ["a", "b", "a", "c"]


def test_penalty_inside_the_returns_hand_computed() -> None:
    # r = [-0.1, 1, 0, 0]: R = (0.9, 0), A^E = +-0.45; G(traj 0) = (-0.1 + 0.5, 1) = (0.4, 1), G(traj 1) = 0;
    # anchor a = {0.4, 0}: +-0.2; b and c are singletons: 0.
    out = gigpo_advantages([-0.1, 1.0, 0.0, 0.0], PEN_TRAJ, PEN_GROUP, PEN_KEYS, gamma=0.5, norm="mean")
    close(out, [0.65, 0.45, -0.65, -0.45])


def test_penalty_on_the_faulty_step_only_hand_computed() -> None:
    # Row scores R - p = (0.9, 1, 0, 0), mean 0.475: A^E = (0.425, 0.525, -0.475, -0.475). Step returns
    # from the raw rewards, G = (0.5, 1, 0, 0), then G - p = (0.4, 1, 0, 0); anchor a = {0.4, 0}: +-0.2.
    # The penalty reaches neither the second step's return nor trajectory 0's other scores.
    out = gigpo_advantages([0.0, 1.0, 0.0, 0.0], PEN_TRAJ, PEN_GROUP, PEN_KEYS, gamma=0.5, norm="mean",
                           episode_baseline="step", penalties=[0.1, 0.0, 0.0, 0.0])  # fmt: skip
    close(out, [0.625, 0.525, -0.675, -0.475])
    assert abs(float(out.sum())) < 1e-6  # step-row statistics: the group's advantages sum to zero
    ep = grpo_advantages([0.0, 1.0, 0.0, 0.0], PEN_TRAJ, PEN_GROUP, norm="mean", episode_baseline="step",
                         penalties=[0.1, 0.0, 0.0, 0.0])  # fmt: skip
    close(ep, [0.425, 0.525, -0.475, -0.475])


def test_per_row_penalties_need_the_step_baseline() -> None:
    with pytest.raises(ValueError, match="episode_baseline='step'"):
        gigpo_advantages([0.0, 1.0], [0, 1], [0, 0], ["a", "a"], penalties=[0.1, 0.0], norm="mean")
    with pytest.raises(ValueError, match="one value per row"):
        grpo_advantages([0.0, 1.0], [0, 1], [0, 0], episode_baseline="step", penalties=[0.1])


def test_an_all_won_group_is_net_negative_under_the_trajectory_baseline_only() -> None:
    # Three won episodes; the first refused one action (penalty 0.1 inside its return) and so has one row
    # more: R = (0.9, 1, 1), mean 0.9667. Per trajectory: A = (-0.0667, +0.0333, +0.0333), and over the rows
    # (-0.0667 twice) the batch sums to -0.0667: every update pushes down more than it pushes up. Over step
    # rows: row scores (0.9, 0.9, 1, 1), mean 0.95, A = (-0.05, -0.05, +0.05, +0.05), summing to 0.
    rewards, traj, group = [-0.1, 1.0, 1.0, 1.0], [0, 0, 1, 2], [0, 0, 0, 0]
    per_traj = grpo_advantages(rewards, traj, group, norm="mean")
    close(per_traj, [-1 / 15, -1 / 15, 1 / 30, 1 / 30])
    assert float(per_traj.sum()) == pytest.approx(-1 / 15)
    per_row = grpo_advantages(rewards, traj, group, norm="mean", episode_baseline="step")
    close(per_row, [-0.05, -0.05, 0.05, 0.05])
    assert abs(float(per_row.sum())) < 1e-6


def test_the_auto_placement_charges_the_faulty_step_wherever_rows_are_pooled() -> None:
    rows = AdvantageConfig()  # the defaults: step-row statistics, auto placement
    assert [penalty_placement(rows, algo) for algo in ("gigpo", "grpo", "rloo")] == ["step", "step", "return"]
    paper = AdvantageConfig(episode_baseline="trajectory")
    assert [penalty_placement(paper, algo) for algo in ("gigpo", "grpo", "rloo")] == ["return"] * 3
    assert penalty_placement(AdvantageConfig(penalty_placement="return"), "gigpo") == "return"  # as asked
