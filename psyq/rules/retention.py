"""Retention: how many finished jobs a queue keeps (BullMQ's removeOnComplete/removeOnFail),
as the policy every store applies when it settles a job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KEEP_ALL", "KEEP_NONE", "KeepJobs", "keep_jobs"]


@dataclass(frozen=True, slots=True)
class KeepJobs:
    """How many finished jobs to keep: newest `count` and/or younger than `age_ms`."""

    count: int | None = None
    age_ms: int | None = None
    limit: int | None = None  # most jobs removed per age clean-up

    @property
    def keeps_all(self) -> bool:
        return self.count is None and self.age_ms is None


KEEP_ALL = KeepJobs()
KEEP_NONE = KeepJobs(count=0)


def keep_jobs(value: bool | int | Mapping[str, Any] | None) -> KeepJobs:
    """Turn a canonical removeOnComplete/removeOnFail value into a `KeepJobs` policy."""
    if value is None or value is False:
        return KEEP_ALL
    if value is True:
        return KEEP_NONE
    if isinstance(value, int):
        return KeepJobs(count=value)
    age = value.get("age")
    return KeepJobs(
        count=value.get("count"),
        age_ms=None if age is None else age * 1000,
        limit=value.get("limit"),
    )
