"""benchmarks/bench_speed.py: the recording, the replays and the GiGPO timing, on a tiny job."""

import json

import numpy as np
import pytest
from cold_start import COLD_UPDATES

from agents.stopwatch import Stopwatch
from algos.logprobs import Sample
from benchmarks import bench_speed, trl_compare


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


def test_by_iteration_cuts_the_calls_at_each_log_also_without_an_update():
    calls = [("generate", 1), ("step", 2), ("log",), ("generate", 3), ("log",), ("generate", 4), ("step", 5),
             ("log",), ("generate", 6)]  # fmt: skip
    assert bench_speed.by_iteration(calls) == [[("generate", 1), ("step", 2)], [("generate", 3)],
                                               [("generate", 4), ("step", 5)]]  # fmt: skip


def _sample(n: int) -> Sample:
    return Sample([1, 2], [3] * n, 0.5, [0.0] * n)


def test_replayed_work_counts_tokens_and_steps_and_is_checked_against_the_metrics():
    calls = [("generate", [[1], [2]], [[5, 6, 7], [8]], 2), ("generate", [[1]], [[9, 9]], 2),
             ("step", [_sample(3), _sample(1)]), ("step", [_sample(2)])]  # fmt: skip
    work = bench_speed.replayed_work(calls)
    assert work == {"generated_tokens": 6, "backward_tokens": 6, "optimizer_steps": 2}
    # one step taken, one stopped by the KL target after its backward: two backward passes
    bench_speed.check_replay({"iteration": 3, "train/backward_tokens": 6.0, "train/optimizer_steps": 1.0,
                              "train/early_stopped": 1.0}, work)  # fmt: skip
    with pytest.raises(bench_speed.UnequalWork, match="iteration 3"):
        bench_speed.check_replay({"iteration": 3, "train/backward_tokens": 4.0, "train/optimizer_steps": 2.0}, work)
    # an iteration that skipped its update logs no train/ keys and replays no step
    bench_speed.check_replay({"iteration": 4, "train/update_skipped": 1.0}, bench_speed.replayed_work(calls[:2]))


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


def _side(work: list[tuple[int, int, int, int]]) -> dict:
    return trl_compare.summary([1.0] * len(work), [dict(zip(trl_compare.WORK, w)) for w in work], 0.1)


def test_equal_work_is_checked_step_by_step_and_token_totals_within_the_tolerance():
    ours = _side([(64, 300, 300, 1), (64, 310, 310, 1)])
    trl_compare.check_equal_work(ours, _side([(64, 320, 320, 1), (64, 330, 330, 1)]))  # 650 vs 610: 6 %
    with pytest.raises(trl_compare.UnequalWork, match="generated_tokens differ by more than 10%"):
        trl_compare.check_equal_work(ours, _side([(64, 400, 310, 1), (64, 310, 310, 1)]))
    with pytest.raises(trl_compare.UnequalWork, match="backward_tokens"):
        trl_compare.check_equal_work(ours, _side([(64, 300, 100, 1), (64, 310, 310, 1)]))
    with pytest.raises(trl_compare.UnequalWork, match="completions per step differ"):
        trl_compare.check_equal_work(ours, _side([(64, 300, 300, 1), (32, 310, 310, 1)]))
    with pytest.raises(trl_compare.UnequalWork, match="timed 2 and 1 steps"):
        trl_compare.check_equal_work(ours, _side([(64, 300, 300, 1)]))
    skipped = _side([(64, 300, 0, 0), (64, 310, 310, 1)])  # our update skipped: no group had varied rewards
    with pytest.raises(trl_compare.UnequalWork, match="our update was skipped"):
        trl_compare.check_equal_work(skipped, _side([(64, 300, 300, 1), (64, 310, 310, 1)]))
    assert ours["work_total"] == {"completions": 128, "generated_tokens": 610, "backward_tokens": 610,
                                  "optimizer_steps": 2}  # fmt: skip
    assert ours["completions_per_s"] == 64.0 and ours["mean_completion_tokens"] == 610 / 128


@pytest.mark.slow
def test_trl_comparison_from_a_model_that_solves_nothing_refuses_the_ratio(capsys):
    """The untrained model solves no problem: our trainer skips every update, TRL runs its own on zero
    advantages. The benchmark says so in one line instead of printing a ratio (it used to print 4.71x)."""
    pytest.importorskip("trl")
    assert trl_compare.main(["--steps", "1", "--sft-steps", "0", "--prompts", "2", "--group-size", "4"]) == 1
    err = capsys.readouterr().err
    assert "no ratio" in err and "our update was skipped" in err and "Traceback" not in err


@pytest.mark.slow
def test_trl_part_from_a_warm_start_does_equal_work_and_replays_our_side(tmp_path):
    """The smallest TRL part that means something: a warm start that solves some problems, one timed step,
    the equal-work record on both sides, then our side replayed."""
    pytest.importorskip("trl")
    assert bench_speed.main(["--parts", "trl", "--out", str(tmp_path), "--trl-flags", "--steps", "1", "--prompts",
                             "4", "--group-size", "4", "--sft-steps", "40"]) == 0  # fmt: skip
    trl = json.loads((tmp_path / "summary.json").read_text())["trl"]
    ours, theirs = trl["ours"]["work_total"], trl["trl"]["work_total"]
    assert ours["completions"] == theirs["completions"] == 16 and ours["optimizer_steps"] == theirs["optimizer_steps"] == 1
    assert ours["backward_tokens"] == ours["generated_tokens"] > 16  # every completion trained on, EOS included
    assert abs(ours["generated_tokens"] - theirs["generated_tokens"]) <= 0.1 * theirs["generated_tokens"]
    assert trl["ratio"] == pytest.approx(trl["ours"]["completions_per_s"] / trl["trl"]["completions_per_s"])
    assert trl["ours_hardware"]["pure_update_s"] > 0 and trl["ours_hardware"]["backward_tokens"] > 0


@pytest.mark.slow
def test_hardware_part_replays_iterations_whose_update_was_skipped(tmp_path):
    """No warm-up: the model solves nothing, every group has zero variance and every update is skipped;
    the replay has generation only (it used to fail with an IndexError)."""
    assert bench_speed.main(["--parts", "hardware", "--iterations", "2", "--out", str(tmp_path), "--train-flags",
                             "--num-groups", "2", "--group-size", "2", "--sft-steps", "0", "--max-new-tokens", "4",
                             "--env", "Arithmetic-v0"]) == 0  # fmt: skip
    it = json.loads((tmp_path / "summary.json").read_text())["hardware"]["iterations"][0]
    assert it["update_skipped"] == 1.0 and it["backward_tokens"] == it["optimizer_steps"] == 0
    assert it["pure_update_s"] == 0 and it["ratio"] == it["wall_s"] / it["pure_generation_s"]


@pytest.mark.slow
def test_hardware_part_end_to_end_on_a_tiny_job(tmp_path):
    """Two iterations of a tiny job: the second is replayed, and the breakdown adds up."""
    assert bench_speed.main(["--parts", "hardware", "gigpo", "--iterations", "2", "--gigpo-sizes", "1000",
                             "--repeats", "1", "--out", str(tmp_path), "--train-flags", "--num-groups", "2",
                             "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "2", "--max-new-tokens",
                             "8", "--no-dynamic-sampling", *COLD_UPDATES]) == 0  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    hw = summary["hardware"]
    assert [p["iteration"] for p in hw["iterations"]] == [2]
    it = hw["iterations"][0]
    assert it["pure_generation_s"] > 0 and it["pure_update_s"] > 0 and it["pure_update_unshared_s"] > 0
    assert it["generated_tokens"] >= it["env_steps"] >= 4  # 4 rollouts, at least one token a step
    assert it["update_skipped"] == 0 and it["backward_tokens"] > 0 and it["optimizer_steps"] >= 1
    assert it["ratio"] == it["wall_s"] / (it["pure_generation_s"] + it["pure_update_s"])
    parts = it["rollout"] + it["advantage"] + it["train"] + it["sync"] + it["log"]
    assert 0 < parts <= it["wall_s"]
    assert it["env"] + it["prompt"] + it["generate"] + it["parse"] <= it["rollout"]
    assert summary["gigpo"][0]["steps"] == 1000
