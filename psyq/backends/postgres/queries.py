"""Reading queues: jobs by id or state, counts, logs, the queue list."""

from __future__ import annotations

from collections.abc import Sequence

from psyq.backends.base import JOB_STATES, JobRecord, Metrics
from psyq.backends.postgres.connection import BullmqConnection
from psyq.rules.slices import inclusive_slice, inclusive_stop

__all__ = ["Queries"]

MAX_METRICS_POINTS = 7 * 24 * 60  # one week of minutes, as BullMQ keeps
# psyq's state -> (the statement family listing it, its $2, the count that sizes it)
_LISTS = {
    "waiting": ("ready", "plain", "waiting"),
    "paused": ("ready", "plain", "waiting"),
    "prioritized": ("ready", "prioritized", "prioritized"),
    "active": ("other", "active", "active"),
    "delayed": ("delayed", "delayed", "delayed"),
    "completed": ("finished", "completed", "completed"),
    "failed": ("finished", "failed", "failed"),
    "waiting-children": ("other", "waiting-children", "waiting_children"),
}


class Queries(BullmqConnection):
    """Reads."""

    async def get_job(self, queue: str, job_id: str) -> JobRecord | None:
        rows = await self._rows("queries.job", queue, job_id)
        return self._records(queue, rows)[0] if rows else None

    async def get_state(self, queue: str, job_id: str) -> str:
        rows = await self._rows("queries.state", queue, job_id)
        if not rows:
            return "unknown"
        state: str = rows[0]["state"]
        return "prioritized" if state == "waiting" and rows[0]["priority"] > 0 else state

    async def get_jobs(
        self, queue: str, states: Sequence[str], start: int, end: int, asc: bool
    ) -> list[JobRecord]:
        """The slice [start, end] of the states' jobs one after the other, each state read
        only for the part of the slice it holds. Waiting jobs are listed as "paused" while
        the queue is paused (and the other way round), as BullMQ's Redis layout keeps them
        in one list or the other."""
        if not states:
            return []
        [counts] = await self._rows("queries.counts", queue)
        paused = bool(counts["paused"])
        records: list[JobRecord] = []
        position, stop = 0, inclusive_stop(end)
        for state in states:
            if state not in _LISTS or (state == "waiting" and paused):
                continue
            if state == "paused" and not paused:
                continue
            family, which, counted = _LISTS[state]
            size = int(counts[counted])
            first = max(start - position, 0)
            last = size if stop is None else min(size, stop - position)
            position += size
            if last <= first:
                continue
            name = f"queries.in_{family}_{'asc' if asc else 'desc'}"
            rows = await self._rows(name, queue, which, first, last - first)
            records += self._records(queue, rows)
        return records

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]:
        [row] = await self._rows("queries.counts", queue)
        paused = bool(row["paused"])
        counts = {
            "waiting": 0 if paused else row["waiting"],
            "paused": row["waiting"] if paused else 0,
            "prioritized": row["prioritized"],
            "active": row["active"],
            "delayed": row["delayed"],
            "completed": row["completed"],
            "failed": row["failed"],
            "waiting-children": row["waiting_children"],
        }
        return {state: int(counts.get(state, 0)) for state in (states or JOB_STATES)}

    async def get_job_logs(
        self, queue: str, job_id: str, start: int, end: int, asc: bool
    ) -> tuple[list[str], int]:
        rows = [row["row"] for row in await self._rows("queries.logs", queue, job_id)]
        ordered = rows if asc else rows[::-1]
        return inclusive_slice(ordered, start, end), len(rows)

    async def is_paused(self, queue: str) -> bool:
        return bool(await self._value("queries.paused", queue))

    async def list_queues(self) -> list[str]:
        return [row["queue"] for row in await self._rows("queries.queues")]

    async def get_counts_per_priority(
        self, queue: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        rows = await self._rows("queries.counts_per_priority", queue, list(priorities))
        return {str(p): int(row[0]) for p, row in zip(priorities, rows, strict=True)}

    async def get_metrics(self, queue: str, kind: str, start: int, end: int) -> Metrics:
        """BullMQ's shape, newest minute first; the current minute is counted too. The
        counts psyq appended since the last fold are folded first."""
        await self._fold(queue)
        rows = await self._rows("queries.metrics", queue, kind)
        total, points = 0, []
        if rows and rows[0]["prev_ts"] is not None:
            row = rows[0]
            total = int(row["count"])
            quiet = max(0, int(row["now"]) // 60_000 - int(row["prev_ts"]) // 60_000)
            current = total - int(row["prev_count"])
            stored = [int(p) for p in row["data"]]
            points = ([0] * min(quiet, MAX_METRICS_POINTS) + [current] + stored)[
                :MAX_METRICS_POINTS
            ]
        elif rows:
            total = int(rows[0]["count"])
            points = [total]
        data = inclusive_slice(points, start, end)
        return {"meta": {"count": total}, "data": data, "count": len(points)}
