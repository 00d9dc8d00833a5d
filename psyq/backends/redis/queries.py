"""Reading a queue: jobs, states, counts, logs, the queue list, metrics."""

from __future__ import annotations

from collections.abc import Sequence

from psyq.backends.base import (
    JOB_STATES,
    JobRecord,
    Metrics,
)
from psyq.backends.redis.connection import RedisConnection
from psyq.backends.redis.groups import grouped_waiting_ids
from psyq.backends.redis.jobs import (
    PRIORITY_SPAN,
    glob_escape,
    record_from_fields,
    record_from_hash,
)
from psyq.rules.slices import inclusive_slice

MAX_METRICS_POINTS = 7 * 24 * 60  # one week of minutes, as BullMQ keeps
# Structures that hold each state (lists count with LLEN, sorted sets with ZCARD).
_LISTS = {"waiting": "wait", "paused": "paused", "active": "active"}
_SETS = {"completed", "failed", "delayed", "prioritized", "waiting-children"}


class Queries(RedisConnection):
    """Reads: jobs by id, state or range, counts, logs, queues, metrics."""

    async def get_job(self, queue: str, job_id: str) -> JobRecord | None:
        flat = await self._run("getJob", queue, job_id)
        if not flat:
            return None
        return record_from_fields(queue, [*flat, "__id", job_id])

    async def get_state(self, queue: str, job_id: str) -> str:
        record = await self.get_job(queue, job_id)
        return "unknown" if record is None or record.state is None else record.state

    async def _ids(self, queue: str, state: str, asc: bool) -> list[str]:
        key = self.queue_key(queue)
        if state in _LISTS:
            ids: list[str] = await self.client.lrange(f"{key}:{_LISTS[state]}", 0, -1)
            return ids[::-1] if asc else ids  # the next to be taken is at the right end
        if state == "waiting-children" or state in _SETS:
            found: list[str] = await self.client.zrange(f"{key}:{state}", 0, -1)
            return found if asc else found[::-1]
        return []

    async def get_jobs(
        self, queue: str, states: Sequence[str], start: int, end: int, asc: bool
    ) -> list[JobRecord]:
        ids: list[tuple[str, str]] = []
        for state in states:
            ids += [(job_id, state) for job_id in await self._ids(queue, state, asc)]
            if state == "waiting":  # the groups' waiting jobs after the plain ones
                ids += [(job_id, state) for job_id in await grouped_waiting_ids(self, queue)]
        chosen = inclusive_slice(ids, start, end)
        key = self.queue_key(queue)
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id, _ in chosen:
                pipe.hgetall(f"{key}:{job_id}")
            hashes = await pipe.execute()
        records = []
        for (job_id, state), fields in zip(chosen, hashes, strict=True):
            if fields:
                record = record_from_hash(queue, job_id, fields)
                record.state = "waiting" if state == "paused" else state
                records.append(record)
        return records

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]:
        key = self.queue_key(queue)
        wanted = list(states or JOB_STATES)
        async with self.client.pipeline(transaction=False) as pipe:
            for state in wanted:
                if state in _LISTS:
                    pipe.llen(f"{key}:{_LISTS[state]}")
                else:
                    pipe.zcard(f"{key}:{state}")
            pipe.get(f"{key}:groups:waiting")
            *counts, grouped = await pipe.execute()
        found = {state: int(count) for state, count in zip(wanted, counts, strict=True)}
        if "waiting" in found:  # the groups' waiting jobs are waiting too
            found["waiting"] += int(grouped or 0)
        return found

    async def get_job_logs(
        self, queue: str, job_id: str, start: int, end: int, asc: bool
    ) -> tuple[list[str], int]:
        key = f"{self.queue_key(queue)}:{job_id}:logs"
        rows: list[str] = await self.client.lrange(key, 0, -1)
        ordered = rows if asc else rows[::-1]
        return inclusive_slice(ordered, start, end), len(rows)

    async def is_paused(self, queue: str) -> bool:
        return bool(await self.client.hexists(self.queue_key(queue) + ":meta", "paused"))

    async def list_queues(self) -> list[str]:
        """Queues with settings, an id counter or an event stream (every add writes an event,
        so a queue holding only custom-id jobs is found too)."""
        names = set()
        for suffix in (":meta", ":id", ":events"):
            pattern = f"{glob_escape(self.prefix)}:*{suffix}"
            async for key in self.client.scan_iter(match=pattern, count=10_000):
                names.add(key[len(self.prefix) + 1 : -len(suffix)])
        return sorted(name for name in names if ":" not in name)

    async def get_metrics(self, queue: str, kind: str, start: int, end: int) -> Metrics:
        """BullMQ's shape, newest minute first; the current minute is counted too."""
        key = f"{self.queue_key(queue)}:metrics:{kind}"
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(key, "count", "prevTS", "prevCount").lrange(key + ":data", 0, -1)
            (count, prev_ts, prev_count), stored = await pipe.execute()
        total = int(count or 0)
        points: list[int] = []
        if prev_ts is not None:
            now = await self.now_ms()  # TIME has no key: a cluster pipeline refuses it
            quiet = max(0, now // 60_000 - int(prev_ts) // 60_000)
            current = total - int(prev_count or 0)
            points = [0] * min(quiet, MAX_METRICS_POINTS) + [current] + [int(p) for p in stored]
            points = points[:MAX_METRICS_POINTS]
        data = inclusive_slice(points, start, end)
        return {"meta": {"count": total}, "data": data, "count": len(points)}

    async def get_counts_per_priority(
        self, queue: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        key = self.queue_key(queue)
        async with self.client.pipeline(transaction=False) as pipe:
            for priority in priorities:
                if priority == 0:
                    pipe.llen(key + ":wait")
                else:
                    low = priority * PRIORITY_SPAN
                    pipe.zcount(key + ":prioritized", low, low + PRIORITY_SPAN - 1)
            counts = await pipe.execute()
        return {str(p): int(n) for p, n in zip(priorities, counts, strict=True)}
