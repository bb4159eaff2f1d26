"""Stopwatch: seconds spent per named section of the loop, for the `time/*` tags.

The agent owns one (prompt building, generation, parsing) and the collector times its env
calls on the agent's, so one `lap()` per iteration gives where the rollout time went. A
section costs two `perf_counter` calls, well under a microsecond.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class Stopwatch:
    def __init__(self) -> None:
        self.totals: defaultdict[str, float] = defaultdict(float)

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] += time.perf_counter() - start

    def lap(self) -> dict[str, float]:
        """The seconds per section since the last lap; starts the next lap from zero."""
        out = dict(self.totals)
        self.totals.clear()
        return out
