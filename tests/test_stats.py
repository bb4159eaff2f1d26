"""algos/stats.py: the one rule every metric of the learner and the reward layer merges by."""

import math

import pytest

from algos.stats import Stats


def test_a_mean_is_weighted_an_extreme_is_kept():
    s = Stats()
    s.add("train/clip_frac", 0.5, 2.0)  # 2 tokens, half clipped
    s.add("train/clip_frac", 0.0, 6.0)
    s.add("train/ratio_max", 1.3)
    s.add("train/ratio_max", 1.1)  # a later mini-batch's smaller maximum does not lower it
    s.add("rollout_is/ratio_min", 0.9)
    s.add("rollout_is/ratio_min", 0.7)
    assert s.values() == {"train/clip_frac": 1.0 / 8, "train/ratio_max": 1.3, "rollout_is/ratio_min": 0.7}


def test_absorb_adds_sums_and_weights():
    update, step = Stats(), Stats()
    update.add("train/entropy", 2.0, 4.0)
    step.add("train/entropy", 1.0, 12.0)
    step.add("train/ratio_max", 2.5)
    update.add("train/ratio_max", 3.0)
    update.absorb(step)
    assert update.values() == {"train/entropy": (8.0 + 12.0) / 16.0, "train/ratio_max": 3.0}


def test_merge_skips_nan_parts_and_parts_without_the_key():
    a, b, c = Stats(), Stats(), Stats()
    a.add("reward/env", 1.0, 3.0)
    b.add("reward/env", math.nan)
    c.add("train/lr", 1e-4)
    merged = Stats.merge([a, b, c])
    assert merged == {"reward/env": 1.0, "train/lr": 1e-4}
    assert math.isnan(Stats.merge([b])["reward/env"])  # nothing measured anywhere: NaN, not 0


def test_totals_add_over_parts_and_one_part_is_its_own_values():
    parts = [Stats.of({"reward/errors": 2.0, "reward/env": 0.25}), Stats.of({"reward/errors": 1.0, "reward/env": 0.75})]
    assert Stats.merge(parts, total=lambda k: k.endswith("errors")) == {"reward/errors": 3.0, "reward/env": 0.5}
    one = Stats()
    for v in (0.1, 0.2, 0.7):
        one.add("train/loss", v)
    assert Stats.merge([one]) == one.values() == {"train/loss": pytest.approx(1.0 / 3)}
