"""benchmarks/bench_speed.py: the recording, the replays and the GiGPO timing, on a tiny job."""

import json

import numpy as np
import pytest

from agents.stopwatch import Stopwatch
from benchmarks import bench_speed


def test_stopwatch_accumulates_sections_and_lap_starts_over():
    clock = Stopwatch()
    for _ in range(3):
        with clock.section("a"):
            pass
    with clock.section("b"):
        sum(range(10_000))
    first = clock.lap()
    assert set(first) == {"a", "b"} and first["b"] > 0 and first["a"] >= 0
    assert clock.lap() == {}
    try:
        with clock.section("c"):
            raise ValueError
    except ValueError:
        pass
    assert "c" in clock.lap()  # an exception still stops the clock


def test_by_iteration_cuts_the_calls_at_each_update():
    calls = [("generate", 1), ("step", 2), ("update",), ("generate", 3), ("generate", 4), ("step", 5), ("update",),
             ("generate", 6)]  # fmt: skip
    assert bench_speed.by_iteration(calls) == [[("generate", 1), ("step", 2)],
                                               [("generate", 3), ("generate", 4), ("step", 5)]]  # fmt: skip


def test_synthetic_steps_are_lockstep_groups_of_eight():
    steps = bench_speed.synthetic_steps(2_000, seed=1)
    assert len(steps) == 2_000
    trajs = {}
    for s in steps:
        trajs.setdefault(s.traj_id, []).append(s)
    for rows in trajs.values():
        assert [r.t for r in rows] == list(range(len(rows)))  # time order within a trajectory
        assert len({r.group_id for r in rows}) == 1
        assert sum(r.terminated or r.truncated for r in rows) <= 1 and all(r.won == rows[0].won for r in rows)
    per_group = {}
    for tid, rows in trajs.items():
        per_group.setdefault(rows[0].group_id, set()).add(tid)
    assert all(len(t) == 8 for g, t in per_group.items() if g < max(per_group))  # the last group may be cut
    firsts = [s.t for s in steps[:8]]
    assert firsts == [0] * 8  # lockstep: every trajectory's first step comes first


def test_gigpo_scaling_times_the_trainer_call():
    out = bench_speed.gigpo_scaling([1_000, 4_000], repeats=1)
    assert [r["steps"] for r in out] == [1_000, 4_000]
    assert all(r["seconds"] > 0 and np.isfinite(r["us_per_step"]) for r in out)


@pytest.mark.slow
def test_hardware_part_end_to_end_on_a_tiny_job(tmp_path):
    """Two iterations of a tiny job: the second is replayed, and the breakdown adds up."""
    assert bench_speed.main(["--parts", "hardware", "gigpo", "--iterations", "2", "--gigpo-sizes", "1000",
                             "--repeats", "1", "--out", str(tmp_path), "--train-flags", "--num-groups", "2",
                             "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "2", "--max-new-tokens",
                             "8", "--no-dynamic-sampling"]) == 0  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    hw = summary["hardware"]
    assert [p["iteration"] for p in hw["iterations"]] == [2]
    it = hw["iterations"][0]
    assert it["pure_generation_s"] > 0 and it["pure_update_s"] > 0 and it["pure_update_unshared_s"] > 0
    assert it["generated_tokens"] >= it["env_steps"] >= 4  # 4 rollouts, at least one token a step
    assert it["ratio"] == it["wall_s"] / (it["pure_generation_s"] + it["pure_update_s"])
    parts = it["rollout"] + it["advantage"] + it["train"] + it["sync"] + it["log"]
    assert 0 < parts <= it["wall_s"]
    assert it["env"] + it["prompt"] + it["generate"] + it["parse"] <= it["rollout"]
    assert summary["gigpo"][0]["steps"] == 1000
