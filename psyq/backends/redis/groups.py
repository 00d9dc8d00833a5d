"""Groups (BullMQ Pro's `group: {id}`) on Redis: settings, pause/resume and the getters.

The layout is in `lua/includes/groups.lua`: each group's waiting jobs in a line of their own
(outside `wait`, so a plain BullMQ take never sees them): a list of those without a group
priority (`group-fifo:<id>`), then a sorted set of those with one (`group:<id>`); the groups
that can be served in `groups:ready` (taken lowest first, re-added at the end), limited ones
in `groups:limited`, those at a concurrency in `groups:full`, active counts in
`groups:active`, a group's own settings in `group-opts:<id>`; the takes of several jobs in
`lua/includes/grouptake.lua`. Changes go through `lua/groupControl-0.lua` (atomic with the
rotation); reads read the keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psyq.backends.base import GroupInfo, GroupSettings, JobRecord, Limiter
from psyq.backends.redis.connection import RedisConnection
from psyq.backends.redis.jobs import MANUAL_LIMIT, record_from_hash

__all__ = [
    "GROUP_MAX_SIZE",
    "GROUP_SPAN",
    "RedisGroups",
    "group_settings",
    "grouped_waiting_ids",
    "set_group_settings",
]

GROUP_SPAN = 2**32  # a group line's score = group priority * 2^32 + sequence (groups.lua)
GROUP_MAX_SIZE = -12  # addJobs' reply code: a job would pass its group's maxSize


def _ranked(key: str, group_id: str) -> str:
    """The group's waiting jobs with a group priority (a sorted set)."""
    return f"{key}:group:{group_id}"


def _fifo(key: str, group_id: str) -> str:
    """The group's waiting jobs without one (a list, first first), before the ranked ones."""
    return f"{key}:group-fifo:{group_id}"


def _span(start: int, end: int, total: int) -> tuple[int, int] | None:
    """Redis' reading of the index range start..end (negative: from the end) over `total`
    items, as (first, last) with 0 <= first <= last < total, or None when it holds none."""
    first = start + total if start < 0 else start
    last = min(end + total if end < 0 else end, total - 1)
    first = max(first, 0)
    return (first, last) if first <= last else None


def _opts(key: str, group_id: str) -> str:
    return f"{key}:group-opts:{group_id}"


def _limiter(key: str, group_id: str) -> str:
    return f"{key}:group-limiter:{group_id}"


async def grouped_waiting_ids(backend: RedisConnection, queue: str) -> list[str]:
    """The waiting jobs of every group, group by group (by id), each in its line's order."""
    key = backend.queue_key(queue)
    group_ids: list[str] = await backend.client.zrange(f"{key}:groups", 0, -1)
    if not group_ids:
        return []
    async with backend.client.pipeline(transaction=False) as pipe:
        for group_id in group_ids:
            pipe.lrange(_fifo(key, group_id), 0, -1).zrange(_ranked(key, group_id), 0, -1)
        parts: list[list[str]] = await pipe.execute()
    return [job_id for part in parts for job_id in part]


def _status(info: dict[str, Any], now: int) -> str:
    """paused > limited > full > waiting (a group with waiting jobs out of the rotation,
    neither paused nor limited, is full: it left at a worker's concurrency)."""
    if info["paused"]:
        return "paused"
    if (info["limited"] is not None and info["limited"] > now) or info["manual"]:
        return "limited"
    own = info["concurrency"]
    if own is not None and info["active"] >= own:
        return "full"
    if info["waiting"] and info["ready"] is None and info["limited"] is None:
        return "full"
    return "waiting"


class RedisGroups(RedisConnection):
    """The contract's Groups (psyq/backends/contract/groups.py) on Redis."""

    async def _control(self, queue: str, group_id: str, *change: Any) -> int:
        return int(await self._run("groupControl", queue, group_id, *change))

    async def set_group_concurrency(
        self, queue: str, group_id: str, concurrency: int | None
    ) -> None:
        await self._control(queue, group_id, "concurrency", concurrency or "")

    async def get_group_concurrency(self, queue: str, group_id: str) -> int | None:
        key = self.queue_key(queue)
        value = await self.client.hget(_opts(key, group_id), "concurrency")
        return None if value is None else int(value)

    async def set_group_rate_limit(
        self, queue: str, group_id: str, limiter: Limiter | None
    ) -> None:
        if limiter is None:
            await self._control(queue, group_id, "limit", "")
        else:
            await self._control(queue, group_id, "limit", limiter.max, limiter.duration)

    async def rate_limit_group(self, queue: str, group_id: str, delay_ms: int) -> None:
        await self._control(queue, group_id, "ratelimit", delay_ms)

    async def get_group_rate_limit_ttl(self, queue: str, group_id: str) -> int:
        ttl = int(await self.client.pttl(_limiter(self.queue_key(queue), group_id)))
        return max(0, ttl)

    async def pause_group(self, queue: str, group_id: str) -> bool:
        return await self._control(queue, group_id, "pause") == 1

    async def resume_group(self, queue: str, group_id: str) -> bool:
        return await self._control(queue, group_id, "resume") == 1

    async def get_group_jobs(
        self, queue: str, group_id: str, start: int, end: int
    ) -> list[JobRecord]:
        key = self.queue_key(queue)
        ids = await self._line_ids(key, group_id, start, end)
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(f"{key}:{job_id}")
            hashes = await pipe.execute()
        records = []
        for job_id, fields in zip(ids, hashes, strict=True):
            if fields:
                record = record_from_hash(queue, job_id, fields)
                record.state = "waiting"
                records.append(record)
        return records

    async def _line_ids(self, key: str, group_id: str, start: int, end: int) -> list[str]:
        """The ids at start..end of the group's line (its list, then its ranked set)."""
        fifo, ranked = _fifo(key, group_id), _ranked(key, group_id)
        async with self.client.pipeline(transaction=True) as pipe:
            sizes: list[int] = await pipe.llen(fifo).zcard(ranked).execute()
        span = _span(start, end, sizes[0] + sizes[1])
        if span is None:
            return []
        first, last = span
        async with self.client.pipeline(transaction=False) as pipe:
            if first < sizes[0]:
                pipe.lrange(fifo, first, min(last, sizes[0] - 1))
            if last >= sizes[0]:
                pipe.zrange(ranked, max(first - sizes[0], 0), last - sizes[0])
            parts: list[list[str]] = await pipe.execute()
        return [job_id for part in parts for job_id in part]

    async def get_groups_job_count(self, queue: str) -> int:
        return int(await self.client.get(self.queue_key(queue) + ":groups:waiting") or 0)

    async def get_group_active_count(self, queue: str, group_id: str) -> int:
        key = self.queue_key(queue)
        return int(await self.client.hget(f"{key}:groups:active", group_id) or 0)

    async def get_counts_per_priority_for_group(
        self, queue: str, group_id: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        key = self.queue_key(queue)
        ranked = _ranked(key, group_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.llen(_fifo(key, group_id))  # the jobs of priority 0
            for priority in priorities:
                low = priority * GROUP_SPAN
                pipe.zcount(ranked, low, low + GROUP_SPAN - 1)
            unranked, *counts = await pipe.execute()
        return {
            str(p): int(n) + (int(unranked) if p == 0 else 0)
            for p, n in zip(priorities, counts, strict=True)
        }

    async def get_groups(self, queue: str, start: int, end: int) -> list[GroupInfo]:
        key = self.queue_key(queue)
        group_ids: list[str] = await self.client.zrange(f"{key}:groups", start, end)
        if not group_ids:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for group_id in group_ids:
                pipe.llen(_fifo(key, group_id)).zcard(_ranked(key, group_id))
                pipe.hget(f"{key}:groups:active", group_id)
                pipe.hmget(_opts(key, group_id), "concurrency", "paused")
                pipe.zscore(f"{key}:groups:ready", group_id)
                pipe.zscore(f"{key}:groups:limited", group_id)
                pipe.get(_limiter(key, group_id))
            replies = await pipe.execute()
        now = await self.now_ms()
        return [
            self._group_info(group_id, replies[7 * i : 7 * i + 7], now)
            for i, group_id in enumerate(group_ids)
        ]

    @staticmethod
    def _group_info(group_id: str, replies: list[Any], now: int) -> GroupInfo:
        unranked, ranked, active, (concurrency, paused), ready, limited, used = replies
        info = {
            "waiting": int(unranked) + int(ranked),
            "active": int(active or 0),
            "concurrency": None if concurrency is None else int(concurrency),
            "paused": paused is not None,
            "ready": ready,
            "limited": None if limited is None else int(limited),
            "manual": used is not None and int(used) >= MANUAL_LIMIT,
        }
        return {
            "id": group_id,
            "waiting": info["waiting"],
            "active": info["active"],
            "status": _status(info, now),
        }

    async def get_groups_count(self, queue: str) -> int:
        return int(await self.client.zcard(self.queue_key(queue) + ":groups"))


# ---------------------------------------------------------------------- migrate
async def group_settings(backend: RedisConnection, queue: str) -> dict[str, GroupSettings]:
    """{group id: its own settings}, for QueueMeta["groups"] (only groups with some)."""
    key = backend.queue_key(queue)
    group_ids: list[str] = await backend.client.zrange(f"{key}:groups", 0, -1)
    async with backend.client.pipeline(transaction=False) as pipe:
        for group_id in group_ids:
            pipe.hmget(_opts(key, group_id), "concurrency", "max", "duration", "paused")
        replies = await pipe.execute()
    found: dict[str, GroupSettings] = {}
    for group_id, values in zip(group_ids, replies, strict=True):
        settings = _settings(*values)
        if settings:
            found[group_id] = settings
    return found


def _settings(
    concurrency: str | None, max_jobs: str | None, duration: str | None, paused: str | None
) -> GroupSettings:
    settings: GroupSettings = {}
    if concurrency is not None:
        settings["concurrency"] = int(concurrency)
    if max_jobs is not None and duration is not None:
        settings["limiter"] = [int(max_jobs), int(duration)]
    if paused is not None:
        settings["paused"] = True
    return settings


async def set_group_settings(
    backend: RedisConnection, queue: str, groups: dict[str, GroupSettings]
) -> None:
    """Groups' own settings as `group_settings` read them (set_queue_meta)."""
    for group_id, settings in groups.items():
        changes: list[tuple[Any, ...]] = []
        if "concurrency" in settings:
            changes.append(("concurrency", settings["concurrency"]))
        if "limiter" in settings:
            changes.append(("limit", *settings["limiter"]))
        if settings.get("paused"):
            changes.append(("pause",))
        for change in changes:
            await backend._run("groupControl", queue, group_id, *change)
