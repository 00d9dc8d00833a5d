"""Groups' settings, pause and resume, getters, and `maxSize` at the add (sql/groups.sql:
how a grouped job waits in its group's line, outside the layout's takes)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from psyq.backends.base import JobRecord, NewJob
from psyq.backends.contract.shapes import GroupInfo
from psyq.backends.postgres.adding import Adding
from psyq.backends.postgres.statements import Statements
from psyq.backends.records import Limiter
from psyq.errors import GroupMaxSizeExceededError
from psyq.rules.slices import inclusive_stop

__all__ = ["GroupAdmin"]


def _page(start: int, end: int) -> tuple[int, int | None]:
    """(offset, limit) of BullMQ's inclusive slice for non-negative ends (-1: to the end)."""
    stop = inclusive_stop(end)
    return start, None if stop is None else max(stop - start, 0)


def _sized(jobs: Sequence[NewJob]) -> dict[str, int]:
    """{group: its maxSize} for the jobs that give one."""
    sizes: dict[str, int] = {}
    for new in jobs:
        group = new.opts.get("group")
        if isinstance(group, dict) and group.get("maxSize") is not None:
            sizes[str(group["id"])] = int(group["maxSize"])
    return sizes


class GroupAdmin(Adding):
    """The contract's Groups group on `postgresql://`."""

    async def _add_jobs(
        self, queue: str, jobs: Sequence[NewJob], on: Statements | None
    ) -> list[JobRecord]:
        """As Adding's. The add's own statement refuses the whole batch when it would put
        more jobs in a group than a job's `maxSize` allows (counted job by job, in batch
        order, with the groups' rows held: sql/groups.sql psyq_group_admit). On the
        application's transaction the sizes are also read first, so a batch refused for
        them leaves that transaction usable."""
        if on is not None and _sized(jobs):
            await self._check_sizes(queue, jobs)
        records = await super()._add_jobs(queue, jobs, on)
        if any("group" in new.opts for new in jobs):
            note = getattr(self, "_note_groups", None)
            if note is not None:
                note(queue)
        return records

    async def _check_sizes(self, queue: str, jobs: Sequence[NewJob]) -> None:
        """The sizes as the pool reads them (before the application's transaction adds)."""
        counts: Counter[str] = Counter()
        for gid in _sized(jobs):
            counts[gid] = int(await self._value("groups.line_count", queue, gid))
        for new in jobs:
            group = new.opts.get("group")
            if not isinstance(group, dict):
                continue
            gid = str(group["id"])
            counts[gid] += 1
            max_size = group.get("maxSize")
            if max_size is not None and counts[gid] > int(max_size):
                raise GroupMaxSizeExceededError(queue, gid, int(max_size))

    # ------------------------------------------------------------------ settings
    async def set_group_concurrency(
        self, queue: str, group_id: str, concurrency: int | None
    ) -> None:
        await self._rows("groups.set_concurrency", queue, group_id, concurrency)
        if concurrency is None:
            await self._rows("groups.tidy", queue, group_id)

    async def get_group_concurrency(self, queue: str, group_id: str) -> int | None:
        rows = await self._rows("groups.settings", queue, group_id)
        return None if not rows else rows[0]["concurrency"]

    async def set_group_rate_limit(
        self, queue: str, group_id: str, limiter: Limiter | None
    ) -> None:
        most, duration = (None, None) if limiter is None else (limiter.max, limiter.duration)
        await self._rows("groups.set_rate_limit", queue, group_id, most, duration)
        if limiter is None:
            await self._rows("groups.tidy", queue, group_id)

    async def rate_limit_group(self, queue: str, group_id: str, delay_ms: int) -> None:
        await self._rows("groups.park", queue, group_id, delay_ms)

    async def get_group_rate_limit_ttl(self, queue: str, group_id: str) -> int:
        return max(int(await self._value("groups.rate_limit_ttl", queue, group_id) or 0), 0)

    async def pause_group(self, queue: str, group_id: str) -> bool:
        [row] = await self._rows("groups.pause", queue, group_id, True)
        return bool(row["changed"])

    async def resume_group(self, queue: str, group_id: str) -> bool:
        [row] = await self._rows("groups.pause", queue, group_id, False)
        if row["changed"]:
            await self._rows("groups.tidy", queue, group_id)
        return bool(row["changed"])

    # ------------------------------------------------------------------ getters
    async def get_group_jobs(
        self, queue: str, group_id: str, start: int, end: int
    ) -> list[JobRecord]:
        offset, limit = _page(start, end)
        rows = await self._rows("groups.jobs", queue, group_id, offset, limit)
        return self._records(queue, rows)

    async def get_groups_job_count(self, queue: str) -> int:
        return int(await self._value("groups.line_count", queue, None))

    async def get_group_active_count(self, queue: str, group_id: str) -> int:
        return int(await self._value("groups.active_count", queue, group_id))

    async def get_counts_per_priority_for_group(
        self, queue: str, group_id: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        asked = list(priorities)
        rows = await self._rows("groups.counts_per_priority", queue, group_id, asked)
        return {str(p): int(row[0]) for p, row in zip(asked, rows, strict=True)}

    async def get_groups(self, queue: str, start: int, end: int) -> list[GroupInfo]:
        offset, limit = _page(start, end)
        rows = await self._rows("groups.list", queue, offset, limit)
        return [
            GroupInfo(
                id=row["id"],
                waiting=int(row["waiting"]),
                active=int(row["active"]),
                status=row["status"],
            )
            for row in rows
        ]

    async def get_groups_count(self, queue: str) -> int:
        return len(await self._rows("groups.list", queue, 0, None))
