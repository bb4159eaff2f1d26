"""Data layer: task sampler estimates, band preference, staleness, group sizes, dynamic sampling."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agents.agent import Act
from agents.parser import OK
from algos.advantages import gigpo_advantages, grpo_advantages
from algos.collector import Collector, Step, Trajectory
from algos.data import DataConfig, DataLayer, TaskSampler, group_size_for, plan_groups, zero_variance
from algos.train import main


def _measure(sampler: TaskSampler, task: int, p: float, g: int, rng) -> None:
    wins = int(rng.binomial(g, p))
    sampler.update(task, wins, g - wins)


# -- estimates -------------------------------------------------------------------------
def test_estimates_converge_on_a_scripted_policy():
    truth = {t: [0.0, 0.25, 0.5, 0.75, 1.0][t % 5] for t in range(20)}
    sampler = TaskSampler(list(truth), DataConfig(sampler_decay=1.0), seed=0)
    rng = np.random.default_rng(0)
    for _ in range(150):
        for task in sampler.sample(5):
            _measure(sampler, task, truth[task], 8, rng)
        sampler.step()
    for task, p in truth.items():
        mean, std = sampler.estimate(task)
        assert std < 0.1, (task, std)
        assert abs(mean - p) <= 3 * std + 0.02, (task, p, mean, std)


def test_estimates_follow_a_policy_that_improves():
    sampler = TaskSampler([0], DataConfig(sampler_decay=0.9), seed=0)
    rng = np.random.default_rng(1)
    for it in range(60):
        _measure(sampler, sampler.sample(1)[0], 0.0 if it < 30 else 0.8, 8, rng)
        sampler.step()
        if it == 29:
            assert sampler.estimate(0)[0] < 0.05
    assert abs(sampler.estimate(0)[0] - 0.8) < 0.1  # old failures decayed away


def test_usefulness_by_hand():
    sampler = TaskSampler([0, 1], DataConfig(group_size=2), seed=0)
    # unseen, Beta(1/2, 1/2): E[p^2] = (1/2)(3/2)/(1 x 2) = 3/8 on each side -> 1 - 3/4
    assert sampler.usefulness(0) == pytest.approx(0.25)
    sampler.update(1, 1, 1)  # Beta(3/2, 3/2): E[p^2] = (3/2)(5/2)/(3 x 4) = 5/16 -> 1 - 5/8
    assert sampler.usefulness(1) == pytest.approx(0.375)


# -- sampling ----------------------------------------------------------------------------
def _three_kinds(mode: str) -> tuple[TaskSampler, set[int]]:
    """30 tasks measured 16 times each: 10 never solved, 10 half the time, 10 always."""
    sampler = TaskSampler(list(range(30)), DataConfig(task_sampler=mode, explore_frac=0.0), seed=0)
    for t in range(30):
        wins = [0, 8, 16][t % 3]
        sampler.update(t, wins, 16 - wins)
    return sampler, {t for t in range(30) if t % 3 == 1}


def test_band_sampling_prefers_tasks_sometimes_solved():
    sampler, band = _three_kinds("band")
    draws = [t for _ in range(400) for t in sampler.sample(5)]
    assert np.mean([t in band for t in draws]) > 0.6  # 1/3 of the pool
    assert all(sampler.in_band(t) == (t in band) for t in range(30))


def test_uniform_sampling_ignores_pass_rates():
    sampler, band = _three_kinds("uniform")
    draws = [t for _ in range(400) for t in sampler.sample(5)]
    assert abs(np.mean([t in band for t in draws]) - 1 / 3) < 0.05
    assert len(set(sampler.sample(30))) == 30  # distinct tasks


def test_unseen_tasks_are_explored():
    sampler = TaskSampler(list(range(100)), DataConfig(explore_frac=0.25), seed=0)
    for t in range(50):
        sampler.update(t, 4, 4)  # half the pool measured, all in the band
    draws = [sampler.sample(8) for _ in range(50)]
    assert all(sum(t >= 50 for t in d) >= 2 for d in draws)  # round(0.25 x 8) unseen per draw


def test_stale_tasks_are_remeasured():
    sampler = TaskSampler(list(range(50)), DataConfig(explore_frac=0.0, stale_after=10), seed=0)
    sampler.update(7, 16, 0)  # always solved: low usefulness, rarely drawn by weight
    fresh = sampler.estimate(7)[1]
    for _ in range(10):
        sampler.step()
        for t in range(50):
            if t != 7:
                sampler.update(t, 8, 8)
    assert sampler.estimate(7)[1] > fresh  # decayed counts: less certain
    assert 7 in sampler.sample(8)  # 10 iterations old: the stalest task is re-measured first


def test_sampler_state_survives_a_checkpoint_round_trip():
    a = TaskSampler(list(range(40)), DataConfig(), seed=3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        for t in a.sample(6):
            _measure(a, t, 0.5, 8, rng)
        a.step()
    buf = io.BytesIO()
    torch.save({"sampler": a.state_dict()}, buf)
    buf.seek(0)
    b = TaskSampler(list(range(40)), DataConfig(), seed=99)
    b.load_state_dict(torch.load(buf, weights_only=True)["sampler"])
    for _ in range(3):
        assert a.sample(6) == b.sample(6)
    assert a.estimate(5) == b.estimate(5)


# -- group size from pass rate -----------------------------------------------------------
def test_group_size_by_hand():
    assert group_size_for(0.5, 0.1, 2, 16) == 4  # 0.5^4 = 0.0625 <= 0.1 < 0.5^3
    assert group_size_for(0.9, 0.01, 2, 16) == 2  # 0.1^2 = 0.01 exactly: float error must not add one
    assert group_size_for(0.0, 0.1, 2, 16) == 16  # never solved: as many tries as allowed
    assert group_size_for(1.0, 0.1, 2, 16) == 2
    assert group_size_for(0.05, 0.1, 2, 16) == 16  # needs 45: capped


@given(st.floats(0.001, 0.999), st.floats(0.001, 0.5), st.integers(2, 8), st.integers(0, 24))
def test_group_size_is_the_smallest_that_meets_the_target(p, target, g_min, extra):
    g_max = g_min + extra
    g = group_size_for(p, target, g_min, g_max)
    assert g_min <= g <= g_max
    if g < g_max:
        assert (1 - p) ** g <= target * (1 + 1e-9)
    if g > g_min:
        assert (1 - p) ** (g - 1) > target * (1 - 1e-9)


def test_plan_groups_fits_the_budget():
    rates = {0: 0.5, 1: 0.0, 2: 0.9, 3: 0.3, 4: 0.0}
    plan = plan_groups([0, 1, 2, 3, 4], rates.get, budget=32, target=0.1, g_min=2, g_max=16)
    assert plan == [(0, 4), (1, 16), (2, 2), (3, 7), (4, 3)]  # the last group takes what is left
    assert sum(g for _, g in plan) == 32
    assert plan_groups([1, 4], rates.get, budget=17, target=0.1, g_min=2, g_max=16) == [(1, 16)]  # 1 left < g_min


# -- dynamic sampling ------------------------------------------------------------------------
def _traj(group: int, traj: int, seed: int, won: bool) -> Trajectory:
    step = Step(group, traj, 0, "s", "obs", [1], [2], [-0.1], "r", "a", OK, True, float(won), True, False, won)
    return Trajectory(group, traj, seed, "task", [step])


def scripted_collect(mixed: set[int], calls: list):
    """Tasks in `mixed` are won by half their rollouts; all others are always lost."""

    def collect(seeds, sizes, first_group_id, first_traj_id):
        calls.append(list(seeds))
        out, tid = [], first_traj_id
        for g, (seed, size) in enumerate(zip(seeds, sizes)):
            for k in range(size):
                out.append(_traj(first_group_id + g, tid, seed, seed in mixed and k % 2 == 0))
                tid += 1
        return out

    return collect


def test_dynamic_sampling_replaces_zero_variance_groups():
    sampler = TaskSampler(list(range(40)), DataConfig(task_sampler="uniform"), seed=0)
    layer = DataLayer(DataConfig(num_groups=4, group_size=4, max_extra_groups=100), sampler)
    calls: list = []
    kept, collected, m = layer.next_batch(scripted_collect(set(range(0, 40, 2)), calls))
    groups = {t.group_id for t in kept}
    assert len(groups) == 4 and m["data/groups_kept"] == 4 and m["data/short_of_target"] == 0
    for g in groups:
        assert not zero_variance([t for t in kept if t.group_id == g])
    assert m["data/extra_rollouts"] == len(collected) - 16 == 4 * m["data/extra_groups"]
    assert m["rollout/frac_zero_std_groups"] == pytest.approx(1 - 4 / m["data/groups_collected"])
    assert len({t.traj_id for t in collected}) == len(collected)  # ids unique across rounds
    assert len({t.group_id for t in collected}) == m["data/groups_collected"]


def test_dynamic_sampling_stops_at_the_cap_and_trains_on_what_there_is():
    sampler = TaskSampler(list(range(40)), DataConfig(task_sampler="uniform"), seed=0)
    layer = DataLayer(DataConfig(num_groups=4, group_size=4, max_extra_groups=6), sampler)
    calls: list = []
    kept, collected, m = layer.next_batch(scripted_collect({0, 1, 2, 3, 4, 5}, calls))
    assert m["data/extra_groups"] == 6 and sum(len(c) for c in calls) == 4 + 6  # stopped at the cap
    drawn = [seed for c in calls for seed in c]
    assert 0 < m["data/groups_kept"] == sum(seed < 6 for seed in drawn) < 4  # this seed's draw: short of 4
    assert m["data/short_of_target"] == 4 - m["data/groups_kept"]
    assert {t.seed for t in kept} <= set(range(6))  # only informative groups
    assert sampler.metrics()["data/tasks_seen"] == len(set(drawn))  # dropped groups are measurements too


def test_with_no_informative_group_there_is_nothing_to_train_on():
    cfg = DataConfig(num_groups=4, group_size=4, max_extra_groups=4)
    layer = DataLayer(cfg, TaskSampler(list(range(40)), cfg))
    kept, collected, m = layer.next_batch(scripted_collect(set(), []))
    assert kept == [] and len(collected) == 32
    assert m["data/groups_kept"] == 0 and m["data/short_of_target"] == 4
    assert m["data/frac_uninformative_groups"] == 1.0


def test_the_trainer_decides_what_is_informative():
    """A group with equal returns is kept when the predicate says its advantages are not all zero
    (GiGPO's step term), and a group with mixed returns dropped when it says they are."""
    sampler = TaskSampler(list(range(40)), DataConfig(task_sampler="uniform"), seed=0)
    odd = lambda group: group[0].seed % 2 == 1  # noqa: E731
    kept, collected, m = DataLayer(DataConfig(num_groups=4, group_size=4), sampler, odd).next_batch(
        scripted_collect(set(range(40)), [])
    )
    assert kept and all(t.seed % 2 == 1 for t in kept) and m["data/groups_kept"] == 4
    assert m["rollout/frac_zero_std_groups"] == 0.0  # returns differed in every group
    assert m["data/frac_uninformative_groups"] == pytest.approx(1 - 4 / m["data/groups_collected"])


def test_without_dynamic_sampling_every_group_is_kept():
    cfg = DataConfig(num_groups=4, group_size=4, dynamic_sampling=False)
    layer = DataLayer(cfg, TaskSampler(list(range(9)), cfg))
    kept, collected, m = layer.next_batch(scripted_collect(set(), []))
    assert kept == collected and len(kept) == 16 and m["rollout/frac_zero_std_groups"] == 1.0


def test_adaptive_group_sizes_within_the_budget():
    sampler = TaskSampler(list(range(40)), DataConfig(explore_frac=0.0), seed=0)
    outcomes = [(0, 16), (8, 8), (15, 1)]  # hard (p = 0.03), medium (0.5), easy (0.91)
    for t in range(40):
        sampler.update(t, *outcomes[t % 3])
    expected = {0: 16, 1: 4, 2: 2}  # smallest G with (1 - p)^G <= 0.1, within [2, 16]
    cfg = DataConfig(num_groups=4, group_size=8, dynamic_sampling=False, adaptive_group_size=True)
    kept, _, m = DataLayer(cfg, sampler).next_batch(scripted_collect(set(), []))
    groups: dict[int, list[int]] = {}
    for t in kept:
        groups.setdefault(t.group_id, []).append(t.seed)
    sizes = [(members[0], len(members)) for members in groups.values()]
    assert sum(g for _, g in sizes) <= 32
    for task, g in sizes[:-1]:
        assert g == expected[task % 3]
    task, g = sizes[-1]  # the last group may take only what is left of the budget
    assert 2 <= g <= expected[task % 3]
    assert m["data/mean_group_size"] == pytest.approx(np.mean([g for _, g in sizes]))


def test_advantages_with_unequal_group_sizes_equal_each_group_alone():
    rng = np.random.default_rng(0)
    sizes = [2, 5, 3]
    traj, group, rewards, keys = [], [], [], []
    tid = 0
    for g, size in enumerate(sizes):
        for _ in range(size):
            for t in range(3):
                traj.append(tid)
                group.append(g)
                rewards.append(float(rng.integers(0, 2)) if t == 2 else 0.0)
                keys.append(f"s{t}{rng.integers(0, 2)}")
            tid += 1
    traj, group, rewards = np.array(traj), np.array(group), np.array(rewards)
    together = grpo_advantages(rewards, traj, group)
    steps = gigpo_advantages(rewards, traj, group, keys, norm="mean")
    for g in range(len(sizes)):
        m = group == g
        np.testing.assert_allclose(together[m], grpo_advantages(rewards[m], traj[m], group[m]), atol=1e-6)
        sub_keys = [k for k, keep in zip(keys, m) if keep]
        np.testing.assert_allclose(steps[m], gigpo_advantages(rewards[m], traj[m], group[m], sub_keys, norm="mean"), atol=1e-6)


# -- collector and the trainer -----------------------------------------------------------------
class FirstCommandAgent:
    """A scripted policy through the agent's `act` interface: the first admissible command."""

    def act(self, views):
        return [Act(v.admissible[0] if v.admissible else "look", OK, "", [1], [2], [-0.1]) for v in views]


def test_collector_runs_groups_of_different_sizes():
    collector = Collector("KeyDoor-v0", num_groups=2, group_size=4)
    trajs = collector.collect(FirstCommandAgent(), [11, 12, 13], first_traj_id=100, group_sizes=[3, 1, 4],
                              first_group_id=10)  # fmt: skip
    assert [t.group_id for t in trajs] == [10] * 3 + [11] + [12] * 4
    assert [t.seed for t in trajs] == [11] * 3 + [12] + [13] * 4
    assert [t.traj_id for t in trajs] == list(range(100, 108))
    with pytest.raises(ValueError, match="do not fit"):
        collector.collect(FirstCommandAgent(), [1, 2], group_sizes=[5, 4])
    collector.close()


TINY = ["--num-groups", "2", "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "4", "--eval-episodes", "0",
        "--max-new-tokens", "8", "--task-pool", "16", "--max-extra-groups", "2"]  # fmt: skip


@pytest.mark.slow
def test_training_logs_the_data_layer_and_checkpoints_the_sampler(tmp_path):
    out = tmp_path / "run"
    args = ["--iterations", "2", "--adaptive-group-size", "--group-size-max", "4", "--max-extra-groups", "2"]
    assert main([*args, "--output-dir", str(out), *TINY]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    it = [r for r in rows if "data/tasks_seen" in r]
    assert len(it) == 2
    for key in ("rollout/frac_zero_std_groups", "data/band_fraction", "data/mean_group_size", "data/extra_rollouts",
                "data/env_steps_total"):  # fmt: skip
        assert key in it[0]
    state = torch.load(out / "checkpoints" / "iter_2" / "trainer_state.pt", weights_only=True)
    assert state["sampler"]["iteration"] == 2 and state["sampler_pool"] == 16
    seen = len(state["sampler"]["stats"])
    assert seen == it[-1]["data/tasks_seen"] > 0

    # Training on from the checkpoint continues its sampler: the tasks it has seen stay seen.
    more = tmp_path / "more"
    assert main(["--model", str(out / "checkpoints" / "iter_2"), "--iterations", "1", "--output-dir", str(more),
                 *TINY[:4], *TINY[6:]]) == 0  # fmt: skip
    row = next(
        json.loads(line) for line in (more / "metrics.jsonl").read_text().splitlines() if "data/tasks_seen" in line
    )
    assert row["data/tasks_seen"] >= seen


@pytest.mark.slow
def test_max_env_steps_stops_the_run(tmp_path):
    out = tmp_path / "run"
    assert main(["--iterations", "50", "--max-env-steps", "1", "--output-dir", str(out), *TINY]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "data/env_steps_total" in r] == [1]
    assert (out / "checkpoints" / "iter_1").exists()
    assert math.isfinite(rows[-1]["data/env_steps_total"])
