"""Taking grouped jobs: after the plain take (transitions.py), the tokens it left take from
the groups, round robin (sql/groups.sql, psyq_group_take); waiting for a group to be ready.

A queue is asked for groups only while it has some: whether it has is read at most once a
second per queue, when a take comes back short (and known at once after this process adds
grouped jobs), so a queue without groups pays no round trip per take."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from psyq.backends.base import FetchRequest, JobRecord, Settlement, StalledResult
from psyq.backends.postgres.listen import EVENTS_CHANNEL, JOBS_CHANNEL
from psyq.backends.postgres.transitions import HELD_WAIT_S, Transitions
from psyq.backends.records import Completed, Failed, GroupLimits
from psyq.errors import PsyqError

__all__ = ["GroupTaking"]

CHECK_EVERY_S = 1.0  # how long whether a queue has groups is trusted


def _group_args(limits: GroupLimits | None) -> tuple[int | None, int | None, int | None]:
    """(concurrency, limit max, limit duration) of the worker's group option."""
    if limits is None:
        return None, None, None
    limiter = limits.limiter
    if limiter is None:
        return limits.concurrency, None, None
    return limits.concurrency, limiter.max, limiter.duration


class GroupTaking(Transitions):
    """The take's group part, and waiting while only groups hold work."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # queue -> (has groups, loop time read); the worker's group limits of its last take
        self._grouped: dict[str, tuple[bool, float]] = {}
        self._group_limits: dict[str, GroupLimits | None] = {}

    def _note_groups(self, queue: str) -> None:
        """This process put grouped jobs in `queue`."""
        self._grouped[queue] = (True, asyncio.get_running_loop().time())

    async def _has_groups(self, queue: str) -> bool:
        now = asyncio.get_running_loop().time()
        known = self._grouped.get(queue)
        if known is not None and now - known[1] < CHECK_EVERY_S:
            return known[0]
        has = bool(await self._value("groups.has_groups", queue))
        self._grouped[queue] = (has, now)
        return has

    async def _take_grouped(
        self, queue: str, fetch: FetchRequest | None, taken: Sequence[JobRecord]
    ) -> list[JobRecord]:
        """Jobs from the groups for the tokens the plain take left unused."""
        if fetch is None or len(taken) >= len(fetch.tokens):
            return []
        used = {record.lock_token for record in taken}
        tokens = [token for token in fetch.tokens if token not in used]
        tokens = tokens[: len(fetch.tokens) - len(taken)]
        if not tokens or not await self._has_groups(queue):
            return []
        self._group_limits[queue] = fetch.group
        limiter = fetch.limiter
        queue_limit = (None, None) if limiter is None else (limiter.max, limiter.duration)
        args = [tokens, fetch.lock_duration, fetch.worker_name, *_group_args(fetch.group)]
        rows = await self._rows("groups.take", queue, *args, *queue_limit)
        if not rows:
            return []
        self._forget_idle(queue)  # the plain idle mark says nothing about the groups
        return await self._deliverable(queue, self._records(queue, rows), rows)

    # ------------------------------------------------------------------ the takes
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        taken = await super().move_to_active(queue, request)
        return taken + await self._take_grouped(queue, request, taken)

    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        taken = await super().move_to_finished(queue, job_id, token, outcome, fetch)
        return taken + await self._take_grouped(queue, fetch, taken)

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        errors, taken = await super().settle_many(queue, settlements, fetch)
        return errors, taken + await self._take_grouped(queue, fetch, taken)

    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        """As the plain check; then the rows of emptied groups whose window has ended go."""
        result = await super().move_stalled_jobs_to_wait(
            queue, max_stalled_count, stalled_interval_ms
        )
        if await self._has_groups(queue):
            await self._rows("groups.sweep", queue)
        return result

    # ------------------------------------------------------------------ waiting
    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        """As the plain wait, unless groups hold jobs: then until a group may be ready (a
        job notification, a finishing job's event, or a limited group's window ending)."""
        if not await self._has_groups(queue):
            await super().wait_for_job(queue, timeout_ms)
            # what woke it may be another process's grouped jobs: the next take asks
            self._grouped.pop(queue, None)
            return
        woken = [
            self.listener.register(channel, queue) for channel in (JOBS_CHANNEL, EVENTS_CHANNEL)
        ]
        try:
            limits = _group_args(self._group_limits.get(queue))
            ready: Any = await self._value("groups.ready_in", queue, limits[0], limits[1])
            if ready is None:
                await super().wait_for_job(queue, timeout_ms)
            elif ready == 0:
                await self.listener.wait(woken[0], int(HELD_WAIT_S * 1000))
            else:
                wait = timeout_ms if ready < 0 else min(timeout_ms, int(ready))
                await self.listener.wait_any(woken, wait)
        finally:
            for channel, future in zip((JOBS_CHANNEL, EVENTS_CHANNEL), woken, strict=True):
                self.listener.discard(channel, queue, future)
