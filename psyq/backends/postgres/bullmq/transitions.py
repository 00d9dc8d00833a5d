"""Fetching, settling (with fetch-next in the same statement), locks and stalls, each one
statement over the layout's functions (move_to_active, move_to_completed, move_to_failed,
retry_job, move_to_delayed, move_active_to_wait, move_stalled_jobs_to_wait)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from psyq.backends.base import (
    Completed,
    ErrorCode,
    Failed,
    FetchRequest,
    JobRecord,
    Retry,
    StalledResult,
    raise_for_code,
)
from psyq.backends.postgres.bullmq.connection import BullmqConnection
from psyq.backends.postgres.bullmq.listen import JOBS_CHANNEL

__all__ = ["Transitions"]


def _limits(fetch: FetchRequest) -> tuple[int | None, int | None]:
    limiter = fetch.limiter
    return (None, None) if limiter is None else (limiter.max, limiter.duration)


class Transitions(BullmqConnection):
    """Moves jobs through their states."""

    # ------------------------------------------------------------------ fetching
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        if not request.tokens:
            return []
        rows = await self._rows(
            "transitions.take",
            queue,
            list(request.tokens),
            request.lock_duration,
            request.worker_name,
            *_limits(request),
        )
        return await self._deliverable(queue, self._records(queue, rows), rows)

    async def _deliverable(
        self, queue: str, records: list[JobRecord], rows: list[object]
    ) -> list[JobRecord]:
        """Jobs taken with a deferred failure (the layout's mark for a job that stalled
        too often) fail now, as BullMQ's workers fail them, instead of running."""
        await self._after_take(queue, rows)
        kept = []
        for record, row in zip(records, rows, strict=True):
            reason = row["deferred_failure"]  # type: ignore[index]
            if reason is None:
                kept.append(record)
                continue
            await self._transition(
                "transitions.fail",
                queue,
                record.id,
                "fail",
                queue,
                record.id,
                record.lock_token,
                reason,
                json.dumps(list(record.stacktrace)),
            )
        return kept

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        future = self.listener.register(JOBS_CHANNEL, queue)
        try:
            ready = await self._value("transitions.ready_in", queue)
            if ready == 0:
                return
            wait = timeout_ms if ready is None else min(timeout_ms, int(ready))
            await self.listener.wait(future, wait)
        finally:
            self.listener.discard(JOBS_CHANNEL, queue, future)

    # ------------------------------------------------------------------ settling
    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        if isinstance(outcome, Completed):
            if fetch is not None and fetch.tokens:
                rows = await self._settle(
                    "transitions.complete_take",
                    queue,
                    job_id,
                    "complete",
                    queue,
                    job_id,
                    token,
                    outcome.returnvalue,
                    list(fetch.tokens),
                    fetch.lock_duration,
                    fetch.worker_name,
                    *_limits(fetch),
                )
                return await self._deliverable(queue, self._records(queue, rows), rows)
            await self._settle(
                "transitions.complete",
                queue,
                job_id,
                "complete",
                queue,
                job_id,
                token,
                outcome.returnvalue,
            )
        else:
            await self._settle(
                "transitions.fail",
                queue,
                job_id,
                "fail",
                queue,
                job_id,
                token,
                outcome.reason,
                json.dumps(list(outcome.stacktrace)),
            )
        return await self.move_to_active(queue, fetch) if fetch is not None else []

    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        stack = json.dumps(list(outcome.stacktrace))
        if outcome.delay > 0:
            await self._settle(
                "transitions.retry_later",
                queue,
                job_id,
                "retry",
                queue,
                job_id,
                token,
                outcome.delay,
                outcome.reason,
                stack,
            )
        else:
            await self._settle(
                "transitions.retry_now",
                queue,
                job_id,
                "retry",
                queue,
                job_id,
                token,
                outcome.reason,
                stack,
            )

    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        await self._transition(
            "transitions.delay",
            queue,
            job_id,
            "delay",
            queue,
            job_id,
            token or "0",
            timestamp_ms,
        )

    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        code = await self._value("transitions.to_wait", queue, job_id, token or "0")
        if code is not None and int(code) == ErrorCode.JOB_MISSING:
            raise_for_code(int(code), queue, job_id, "move to wait")

    # ------------------------------------------------------------------ locks and stalls
    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        if not locks:
            return []
        ids = list(locks)
        rows = await self._rows(
            "transitions.extend_locks", queue, ids, [locks[i] for i in ids], duration_ms
        )
        return [row["id"] for row in rows]

    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        rows = await self._rows("transitions.stalled", queue, max_stalled_count)
        result = StalledResult(stalled=[row["id"] for row in rows if not row["over"]])
        for row in rows:
            if row["over"]:
                await self._rows(
                    "transitions.fail",
                    queue,
                    row["id"],
                    "0",
                    "job stalled more than allowable limit",
                    "[]",
                )
                result.failed.append(row["id"])
        return result
