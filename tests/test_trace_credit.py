"""scripts/trace_credit.py: the credit table of a hand-made batch against hand-computed values."""

from __future__ import annotations

from dataclasses import replace

import pytest

from algos.cli import parse_config
from algos.collector import Step, Trajectory
from algos.credit import invalid_positive
from scripts.trace_credit import main, trace


def _episode(traj: int, states: str, rewards: list[float]) -> Trajectory:
    won = rewards[-1] > 0
    steps = [Step(0, traj, t, s, s, [1], [2], [-0.1], "r", f"go {s}", "ok", True, r, t == len(states) - 1, False, won)
             for t, (s, r) in enumerate(zip(states, rewards))]  # fmt: skip
    return Trajectory(0, traj, 5, "task", steps)


def test_the_credit_of_a_won_and_a_lost_episode_hand_computed():
    # One group of task 5: won a -> b (rewards 0, 1), lost a -> c (0, 0). gamma 0.95, mean_std.
    # Episode term: scores 1 and 0, mean 0.5, std 1/sqrt(2): +-0.5 / (0.7071068 + 1e-6) = +-0.707106.
    # Step term: anchor a holds returns 0.95 and 0: +-0.475 / (0.6717514 + 1e-6) = +-0.707106; b, c alone: 0.
    # Step share: 2 x 0.707 / (4 x 0.707 + 2 x 0.707) = 1/3; not 0 on 2 of 4 rows, where it has the episode
    # term's sign (no sign changes); anchor sizes 2, 2, 1, 1.
    paper = parse_config(["--episode-baseline", "trajectory"])  # the auto placement: inside the returns
    text = trace(paper, [_episode(0, "ab", [0.0, 1.0]), _episode(1, "ac", [0.0, 0.0])])
    assert "| 0 (5) | 1/2 | 4 | 0.33 | 50% | 0% | 1.5, 2 |" in text
    assert "| 0 | go a | yes | 0 | 0.950 | 2, 0.475 | +0.707 | +0.707 | +1.414 |" in text  # won, step 0
    assert "| 1 | go b | yes | 1 | 1.000 | 1, 1.000 | +0.707 | +0.000 | +0.707 |" in text
    assert "| 0 | go a | yes | 0 | 0.000 | 2, 0.475 | -0.707 | -0.707 | -1.414 |" in text  # lost, step 0
    assert "## Group 0 (task 5), a won episode (2 steps)" in text and "a lost episode (2 steps)" in text


def test_a_missing_checkpoint_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--checkpoint", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: checkpoint") and "\n" not in err


def test_invalid_positive_counts_refused_actions_the_update_would_make_likelier():
    steps = _episode(0, "abcd", [0.0, 0.0, 0.0, 1.0]).steps
    steps = [replace(s, action_valid=v) for s, v in zip(steps, [False, False, True, False])]
    assert invalid_positive([1.0, -1.0, 0.5, 0.0], steps) == 1 / 3  # invalid rows: +1, -1, 0
    assert invalid_positive([1.0, 1.0, 1.0, 1.0], [replace(s, action_valid=True) for s in steps]) == 0.0


def test_advantage_settings_can_be_overridden_and_bad_ones_are_one_line(tmp_path, capsys):
    from algos.config import ConfigError
    from scripts.trace_credit import overridden

    a = parse_config(["--episode-baseline", "trajectory"]).advantages
    b = overridden(a, {"penalty_placement": "step", "episode_baseline": "step", "omega": "0.5"})
    assert (b.penalty_placement, b.episode_baseline, b.omega) == ("step", "step", 0.5)
    for values, says in (({"omgea": "1"}, "no setting 'omgea'"), ({"omega": "high"}, "omega takes a float"),
                         ({"penalty_placement": "step"}, "episode-baseline step")):  # fmt: skip
        with pytest.raises(ConfigError, match=says):
            overridden(a, values)
