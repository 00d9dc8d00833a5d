"""Per-minute counts of completed and failed jobs (BullMQ's metrics), bounded."""

from __future__ import annotations

from collections import deque

from psyq.backends.base import Metrics
from psyq.rules.slices import inclusive_slice

__all__ = ["MAX_DATA_POINTS", "MinuteCounts"]

MAX_DATA_POINTS = 7 * 24 * 60  # one week of minutes


class MinuteCounts:
    """Counts per minute, newest last, with zeros for quiet minutes."""

    __slots__ = ("_last_minute", "points", "total")

    def __init__(self) -> None:
        self.points: deque[int] = deque(maxlen=MAX_DATA_POINTS)
        self._last_minute: int | None = None
        self.total = 0

    def record(self, now_ms: int) -> None:
        minute = now_ms // 60_000
        last = self._last_minute
        if last is None or minute > last:
            gap = 0 if last is None else min(minute - last - 1, MAX_DATA_POINTS)
            self.points.extend([0] * gap)
            self.points.append(0)
            self._last_minute = minute
        self.points[-1] += 1
        self.total += 1

    def query(self, start: int, end: int, now_ms: int) -> Metrics:
        """BullMQ's shape: data newest first, sliced [start, end] (end inclusive, -1 = all)."""
        newest_first = list(reversed(self.points))
        if self._last_minute is not None:
            quiet = min(now_ms // 60_000 - self._last_minute, MAX_DATA_POINTS)
            newest_first = [0] * max(0, quiet) + newest_first
        return {
            "meta": {"count": self.total},
            "data": inclusive_slice(newest_first, start, end),
            "count": len(newest_first),
        }
