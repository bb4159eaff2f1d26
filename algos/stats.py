"""Metrics gathered in parts (micro-batches, mini-batches, ranks) and merged by one rule, read from the key.

- a key ending in `_max` / `_min` keeps its extreme over the parts;
- every other key is a weighted mean (by tokens, or 1 per mini-batch); merging parts skips a part
  whose mean is NaN (a rank that measured nothing) and weighs the rest by their weights;
- a key that `total` names is a share of one total (each rank's share of the loss, a rank's error
  count): merging parts adds their values.

The learner accumulates its update in a Stats per rank and merges the ranks' (Stats.merge); the
reward layer's per-rank metrics merge the same way (Stats.merge_values)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def _extreme(key: str) -> Callable[..., float] | None:
    return max if key.endswith("_max") else min if key.endswith("_min") else None


class Stats:
    """Weighted sums per key; `value(key)` is the mean (or the extreme) so far."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, key: str, value: float, weight: float = 1.0) -> None:
        pick = _extreme(key)
        if pick is not None:
            self.sums[key] = pick(self.sums[key], value) if key in self.sums else value
            self.weights[key] = 1.0
        else:
            self.sums[key] = self.sums.get(key, 0.0) + value * weight
            self.weights[key] = self.weights.get(key, 0.0) + weight

    def absorb(self, other: Stats) -> None:
        """Another accumulation folded in (a mini-batch's into the update's): its sums and weights add."""
        for k, s in other.sums.items():
            pick = _extreme(k)
            if pick is not None:
                self.add(k, s)
            else:
                self.sums[k] = self.sums.get(k, 0.0) + s
                self.weights[k] = self.weights.get(k, 0.0) + other.weights[k]

    def value(self, key: str) -> float:
        return self.sums[key] if _extreme(key) else self.sums[key] / self.weights[key]

    def values(self) -> dict[str, float]:
        return {k: self.value(k) for k in self.sums if self.weights[k] > 0}

    @staticmethod
    def merge(parts: Sequence[Stats], total: Callable[[str], bool] = lambda key: False) -> dict[str, float]:
        """One value per key over the parts (every part's keys, in order; one part: its own values)."""
        out = {}
        for k in dict.fromkeys(k for p in parts for k in p.sums):
            live = [p for p in parts if p.weights.get(k, 0.0) > 0]
            if not live:
                continue
            pick = _extreme(k)
            if pick is not None:
                out[k] = pick(p.value(k) for p in live)
            elif total(k):
                out[k] = sum(p.value(k) for p in live)
            else:
                live = [p for p in live if not math.isnan(p.value(k))]
                out[k] = sum(p.sums[k] for p in live) / sum(p.weights[k] for p in live) if live else math.nan
        return out

    @classmethod
    def of(cls, values: dict[str, float]) -> Stats:
        """A part holding plain values, each of weight 1."""
        stats = cls()
        for k, v in values.items():
            stats.add(k, v)
        return stats

    @classmethod
    def merge_values(cls, per_part: Sequence[dict[str, float]], total: Callable[[str], bool] = lambda key: False):
        """Plain per-rank values merged by the rule above."""
        return cls.merge([cls.of(values) for values in per_part], total)
