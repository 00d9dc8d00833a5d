"""`GroupCalls`: a Queue's calls on its groups (BullMQ Pro's group API, snake_case).

A group is a virtual queue inside the queue (the job option `group={"id": ...}`): workers
take jobs without a group first, then serve the groups round-robin, FIFO inside each (or by
the group priority). Each call checks its arguments here, naming a bad one, then makes one
store call (psyq/backends/contract/groups.py says what each does).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from psyq.backends.base import BackendAdapter, GroupInfo, Limiter
from psyq.core.job import Job, QueueRef
from psyq.core.options import group_id
from psyq.rules.limits import MAX_PRIORITY, check_int

__all__ = ["GroupCalls"]


class GroupCalls:
    """Mixed into `Queue`: what it needs is the queue's name and its open store."""

    name: str
    _open: Callable[[], Awaitable[BackendAdapter]]  # the queue's store, opened on first use
    _ref: Callable[[], Awaitable[QueueRef]]  # what its Jobs hold

    async def set_group_concurrency(self, group: str | int, concurrency: int | None) -> None:
        """At most `concurrency` jobs of `group` run at once, across every worker (None:
        back to the workers' `group={'concurrency': n}`)."""
        gid = group_id("group", group)
        if concurrency is not None:
            check_int("concurrency", concurrency, minimum=1)
        await (await self._open()).set_group_concurrency(self.name, gid, concurrency)

    async def get_group_concurrency(self, group: str | int) -> int | None:
        """The group's own concurrency (set_group_concurrency), None when it has none."""
        return await (await self._open()).get_group_concurrency(self.name, group_id("group", group))

    async def set_group_rate_limit(self, group: str | int, max_jobs: int, duration: int) -> None:
        """At most `max_jobs` jobs of `group` start per `duration` ms (over the workers'
        `group={'limit': ...}`)."""
        limiter = Limiter(
            check_int("max", max_jobs, minimum=1), check_int("duration", duration, minimum=1)
        )
        gid = group_id("group", group)
        await (await self._open()).set_group_rate_limit(self.name, gid, limiter)

    async def remove_group_rate_limit(self, group: str | int) -> None:
        """The group's own rate limit goes; the workers' applies again."""
        await (await self._open()).set_group_rate_limit(self.name, group_id("group", group), None)

    async def get_group_rate_limit_ttl(self, group: str | int) -> int:
        """ms until the group's rate limit ends; 0 when it is not limited."""
        gid = group_id("group", group)
        return max(0, await (await self._open()).get_group_rate_limit_ttl(self.name, gid))

    async def rate_limit_group(self, group: str | int, expire_time_ms: int) -> None:
        """Take no job of `group` for `expire_time_ms` ms."""
        delay = check_int("expire_time_ms", expire_time_ms)
        await (await self._open()).rate_limit_group(self.name, group_id("group", group), delay)

    async def pause_group(self, group: str | int) -> bool:
        """Take no job of `group` until resumed; False when it already was paused."""
        return await (await self._open()).pause_group(self.name, group_id("group", group))

    async def resume_group(self, group: str | int) -> bool:
        """Serve `group` again; False when it was not paused."""
        return await (await self._open()).resume_group(self.name, group_id("group", group))

    async def get_group_jobs(self, group: str | int, start: int = 0, end: int = -1) -> list[Job]:
        """The group's waiting jobs, next to be taken first, [start, end] inclusive."""
        gid = group_id("group", group)
        ref = await self._ref()
        records = await ref.backend.get_group_jobs(self.name, gid, start, end)
        return [Job(ref, record) for record in records]

    async def get_groups_job_count(self) -> int:
        """How many jobs wait in all the groups together."""
        return await (await self._open()).get_groups_job_count(self.name)

    async def get_group_active_count(self, group: str | int) -> int:
        """How many jobs of `group` are being processed."""
        gid = group_id("group", group)
        return await (await self._open()).get_group_active_count(self.name, gid)

    async def get_counts_per_priority_for_group(
        self, group: str | int, priorities: Sequence[int]
    ) -> dict[str, int]:
        """{group priority as text: how many of the group's waiting jobs have it} (as
        `get_counts_per_priority`)."""
        gid = group_id("group", group)
        checked = [check_int("priority", p, maximum=MAX_PRIORITY) for p in priorities]
        store = await self._open()
        return await store.get_counts_per_priority_for_group(self.name, gid, checked)

    async def get_groups(self, start: int = 0, end: int = -1) -> list[GroupInfo]:
        """The groups with jobs waiting or active, or settings of their own, by id, each
        with its counts and status ("waiting", "paused", "limited" or "full")."""
        return await (await self._open()).get_groups(self.name, start, end)

    async def get_groups_count(self) -> int:
        """How many groups `get_groups` lists in all."""
        return await (await self._open()).get_groups_count(self.name)
