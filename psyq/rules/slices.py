"""BullMQ's slice rule, in one place: a range `start..end` names items `start` to `end`
*inclusive*, and a negative index counts from the end (-1 = the last item), as Redis's
LRANGE and ZRANGE read it. `getJobs`, `getJobLogs`, `getMetrics`, `getJobSchedulers` and
their kin all take their ranges this way, so every store slices with the same function."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["inclusive_slice", "inclusive_stop"]

T = TypeVar("T")


def inclusive_stop(end: int) -> int | None:
    """The Python slice stop for an inclusive `end`: None (to the end) for -1, else end + 1
    (a negative end below -1 stops that many items before the end)."""
    return None if end == -1 else end + 1


def inclusive_slice(items: Sequence[T], start: int, end: int) -> list[T]:
    """Items `start` to `end`, both included (-1 = the last), as a new list."""
    return list(items[start : inclusive_stop(end)])
