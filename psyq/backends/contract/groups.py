"""The contract's Groups group (part of `BackendAdapter`, psyq/backends/base.py).

A group (BullMQ Pro's `group: {id}` job option) is a virtual queue inside a queue: workers
take jobs without a group first, then rotate over the groups that have work, FIFO inside a
group (or by the group priority: 0 first, then lower numbers). A group's limits hold where
its jobs are taken, in the same atomic transition, across every worker and process: the
worker's `FetchRequest.group` gives the defaults, a group's own settings override them. A
grouped waiting job counts as "waiting" in `get_job_counts`; an empty group keeps nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.contract.shapes import GroupInfo
from psyq.backends.records import JobRecord, Limiter

__all__ = ["Groups"]


class Groups(AdapterRoot):
    """Groups: their settings, pause and resume, and their getters."""

    async def set_group_concurrency(
        self, queue: str, group_id: str, concurrency: int | None
    ) -> None:
        """At most `concurrency` jobs of the group active at once (None: the worker's)."""
        raise self._unsupported("groups")

    async def get_group_concurrency(self, queue: str, group_id: str) -> int | None:
        """The group's own concurrency, None when it has none."""
        raise self._unsupported("groups")

    async def set_group_rate_limit(
        self, queue: str, group_id: str, limiter: Limiter | None
    ) -> None:
        """At most `limiter.max` jobs of the group started per `limiter.duration` ms (None:
        the worker's limit)."""
        raise self._unsupported("groups")

    async def rate_limit_group(self, queue: str, group_id: str, delay_ms: int) -> None:
        """Take no job of the group for `delay_ms` ms (`worker.rate_limit_group`)."""
        raise self._unsupported("groups")

    async def get_group_rate_limit_ttl(self, queue: str, group_id: str) -> int:
        """ms until the group's rate limit ends; 0 when it is not limited."""
        raise self._unsupported("groups")

    async def pause_group(self, queue: str, group_id: str) -> bool:
        """Take no job of the group until resumed; False when it already was paused."""
        raise self._unsupported("groups")

    async def resume_group(self, queue: str, group_id: str) -> bool:
        """Serve the group again; False when it was not paused."""
        raise self._unsupported("groups")

    async def get_group_jobs(
        self, queue: str, group_id: str, start: int, end: int
    ) -> list[JobRecord]:
        """The group's waiting jobs in the order they will be taken, sliced [start, end]."""
        raise self._unsupported("groups")

    async def get_groups_job_count(self, queue: str) -> int:
        """How many jobs wait in all groups together."""
        raise self._unsupported("groups")

    async def get_group_active_count(self, queue: str, group_id: str) -> int:
        """How many jobs of the group are active."""
        raise self._unsupported("groups")

    async def get_counts_per_priority_for_group(
        self, queue: str, group_id: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        """{group priority as text: waiting jobs of the group with it}, for each of
        `priorities` (as `get_counts_per_priority`)."""
        raise self._unsupported("groups")

    async def get_groups(self, queue: str, start: int, end: int) -> list[GroupInfo]:
        """The groups that have jobs waiting or active, or settings of their own, by id,
        sliced [start, end], with their counts and status."""
        raise self._unsupported("groups")

    async def get_groups_count(self, queue: str) -> int:
        """How many groups `get_groups` lists in all."""
        raise self._unsupported("groups")
