"""GiGPO as verl-agent computes it, against ours under configs/gigpo_verl_agent.yaml.

`verl_agent_gigpo` is a plain-Python port of what verl-agent does to one batch of step rows
(verl/trainer/ppo/ray_trainer.py and gigpo/core_gigpo.py), in its order:
  1. step returns from the raw env rewards (compute_step_discounted_returns);
  2. every row scored with its episode's total env reward (the episode reward manager);
  3. the invalid-action penalty off the faulty row's own score and own step return
     (apply_invalid_action_penalty);
  4. episode term: statistics over the group's step rows (episode_norm_reward with
     compute_mean_std_cross_steps=True; a group of one row: mean 0, std 1);
  5. anchor groups: equal observations within a group (build_step_group, exact match);
  6. step term: statistics within the anchor group (step_norm_reward; one row: its own value, std 1);
  7. episode term + w x step term.
std is torch's unbiased std; epsilon 1e-6. Groups here always hold two or more rows, so the
one-row cases (where the two codes differ: ours gives 0) never arise.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from algos.cli import parse_config
from algos.collector import Step
from algos.credit import compute_advantages, informative

PRESET = "configs/gigpo_verl_agent.yaml"


def _norm(values: list[float], mode: str, single_mean_zero: bool) -> list[float]:
    if len(values) == 1:
        mean, std = (0.0 if single_mean_zero else values[0]), 1.0
    else:
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    if mode == "mean_norm":
        return [v - mean for v in values]
    return [(v - mean) / (std + 1e-6) for v in values]


def verl_agent_gigpo(rows: list[dict], gamma: float, coef: float, w: float, mode: str) -> np.ndarray:
    """rows: dicts with group, traj, obs, reward, valid, in batch order (a trajectory's rows in time order)."""
    by_traj: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_traj[r["traj"]].append(i)
    step_ret = [0.0] * len(rows)
    for idx in by_traj.values():
        running = 0.0
        for i in reversed(idx):
            running = rows[i]["reward"] + gamma * running
            step_ret[i] = running
    score = [sum(rows[j]["reward"] for j in by_traj[r["traj"]]) for r in rows]
    for i, r in enumerate(rows):
        penalty = coef * (1.0 - float(r["valid"]))
        score[i] -= penalty
        step_ret[i] -= penalty
    episode = [0.0] * len(rows)
    by_group: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_group[r["group"]].append(i)
    for idx in by_group.values():
        for i, v in zip(idx, _norm([score[i] for i in idx], mode, single_mean_zero=True)):
            episode[i] = v
    step = [0.0] * len(rows)
    anchors: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        anchors[(r["group"], r["obs"])].append(i)
    for idx in anchors.values():
        for i, v in zip(idx, _norm([step_ret[i] for i in idx], mode, single_mean_zero=False)):
            step[i] = v
    return np.array([e + w * s for e, s in zip(episode, step)])


def as_steps(rows: list[dict]) -> list[Step]:
    t_of: dict[int, int] = defaultdict(int)
    out = []
    for r in rows:
        t = t_of[r["traj"]]
        t_of[r["traj"]] += 1
        out.append(Step(r["group"], r["traj"], t, r["obs"], r["obs"], [1], [2], [-0.1], "r", "a",
                        "ok" if r["valid"] else "no_action", r["valid"], r["reward"], False, False, False))  # fmt: skip
    return out


@st.composite
def batches(draw: st.DrawFn) -> list[dict]:
    """Groups of 2-5 trajectories of 1-6 steps, observations from a small alphabet (shared states
    and revisits), sparse and dense rewards, some invalid actions; rows interleaved by time step."""
    trajs, tid = [], 0
    for g in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(2, 5))):
            n = draw(st.integers(1, 6))
            rows = [dict(group=g, traj=tid, obs=draw(st.sampled_from("abcde")),
                         reward=draw(st.sampled_from([0.0, 0.0, 1.0, 0.5, -0.25])),
                         valid=draw(st.booleans()) or draw(st.booleans())) for _ in range(n)]  # fmt: skip
            trajs.append(rows)
            tid += 1
    return [t[k] for k in range(6) for t in trajs if k < len(t)]  # lockstep order


@pytest.mark.parametrize("mode,norm", [("mean_std_norm", "mean_std"), ("mean_norm", "mean")])
@settings(max_examples=60, deadline=None)
@given(rows=batches())
def test_the_preset_matches_verl_agent(rows, mode, norm) -> None:
    cfg = parse_config(["--config", PRESET, "--norm", norm])
    ours, _ = compute_advantages(cfg.algo, cfg.advantages, as_steps(rows))
    a = cfg.advantages
    theirs = verl_agent_gigpo(rows, a.gamma, a.invalid_penalty, a.omega, mode)
    assert np.max(np.abs(ours - theirs)) <= 1e-5


def test_a_seeded_batch_of_a_thousand_rows_matches() -> None:
    rng = np.random.default_rng(0)
    rows, tid = [], 0
    for g in range(16):
        for _ in range(8):
            n = int(rng.integers(1, 20))
            rows += [dict(group=g, traj=tid, obs=f"s{int(rng.integers(0, 12))}", reward=float(rng.random() < 0.1),
                          valid=bool(rng.random() < 0.8)) for _ in range(n)]  # fmt: skip
            tid += 1
    cfg = parse_config(["--config", PRESET])
    ours, _ = compute_advantages(cfg.algo, cfg.advantages, as_steps(rows))
    a = cfg.advantages
    theirs = verl_agent_gigpo(rows, a.gamma, a.invalid_penalty, a.omega, "mean_std_norm")
    assert len(rows) > 1000 and np.max(np.abs(ours - theirs)) <= 1e-5


@settings(max_examples=60, deadline=None)
@given(rows=batches())
def test_the_default_advantages_are_verl_agent_s(rows) -> None:
    """The default section (step-row statistics, the penalty on its own step under auto) computes
    verl-agent's GiGPO advantages; only the learner settings of the preset differ."""
    cfg = parse_config([])
    ours, _ = compute_advantages("gigpo", cfg.advantages, as_steps(rows))
    a = cfg.advantages
    assert np.max(np.abs(ours - verl_agent_gigpo(rows, a.gamma, a.invalid_penalty, a.omega, "mean_std_norm"))) <= 1e-5


def test_the_paper_s_placement_differs_from_it() -> None:
    """The penalty inside the returns with per-trajectory statistics is not verl-agent's."""
    rows = [dict(group=0, traj=t, obs=o, reward=r, valid=v)
            for t, path in enumerate([[("a", 0, True), ("b", 1, True)], [("a", 0, False), ("c", 0, True)]])
            for o, r, v in path]  # fmt: skip
    paper = parse_config(["--penalty-placement", "return", "--episode-baseline", "trajectory"])
    ours, _ = compute_advantages("gigpo", paper.advantages, as_steps(rows))
    theirs = verl_agent_gigpo(rows, 0.95, 0.1, 1.0, "mean_std_norm")
    assert np.max(np.abs(ours - theirs)) > 0.1


# --- dynamic sampling that knows GiGPO -------------------------------------------------


def won_by_two_routes() -> list:
    """8 wins from one start: 4 by a 3-step route (a b c), 4 by a 4-step route (a d e c)."""
    from algos.collector import Trajectory

    out = []
    for t in range(8):
        route = "abc" if t < 4 else "adec"
        steps = [Step(0, t, k, s, s, [1], [2], [-0.1], "r", "a", "ok", True, float(k == len(route) - 1),
                      k == len(route) - 1, False, True) for k, s in enumerate(route)]  # fmt: skip
        out.append(Trajectory(0, t, 0, "task", steps))
    return out


def test_an_all_won_group_with_two_route_lengths_is_informative_under_gigpo_only() -> None:
    group = won_by_two_routes()
    gigpo, grpo = parse_config(["--algo", "gigpo"]), parse_config(["--algo", "grpo"])
    assert informative("gigpo", gigpo.advantages, group) and not informative("grpo", grpo.advantages, group)
    adv, _ = compute_advantages("gigpo", gigpo.advantages, [s for t in group for s in t.steps])
    first = adv[[i for i, s in enumerate(s for t in group for s in t.steps) if s.t == 0]]
    # G_0 = 0.95^2 (3 steps) or 0.95^3 (4 steps): deviations +-0.0225625 over (unbiased std 0.0241202 + 1e-6)
    np.testing.assert_allclose(first, [0.935376] * 4 + [-0.935376] * 4, atol=1e-6)


def test_the_step_signal_of_a_group_won_by_two_routes() -> None:
    """Every episode won: the episode term is 0, so all the signal is the step term's (share 1). It is not
    0 only at the shared start `a` (8 of the 28 rows), whose returns differ by route; b, d and e each lie
    on one route, and c ends both with the win, so their anchor groups see equal returns."""
    group = won_by_two_routes()
    _, stats = compute_advantages("gigpo", parse_config(["--algo", "gigpo"]).advantages, [s for t in group for s in t.steps])
    assert stats["gigpo/step_share"] == pytest.approx(1.0)
    assert stats["gigpo/step_nonzero_frac"] == pytest.approx(8 / 28)
    assert stats["gigpo/sign_change_frac"] == pytest.approx(8 / 28)  # GRPO gives those 8 rows no direction
    _, grpo = compute_advantages("grpo", parse_config(["--algo", "grpo"]).advantages, [s for t in group for s in t.steps])
    assert "gigpo/step_share" not in grpo


def test_equal_returns_and_equal_routes_are_uninformative_under_both() -> None:
    group = won_by_two_routes()[:4]  # the same 3-step route four times
    for algo in ("gigpo", "grpo"):
        assert not informative(algo, parse_config(["--algo", algo]).advantages, group)
