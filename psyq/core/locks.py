"""`Locks`: the part of a Worker that keeps its active jobs' locks and watches them.

It renews the lock of every active job (`extend_locks`, on the worker's lock timer) and
tells a lost lock from a renewal that only crossed the job's own settle; it stops the
active jobs that `queue.cancel_job` marked (`check_cancelled`); it moves jobs whose lock
expired back to waiting (`check_stalled`). It reads the worker's active jobs and the tasks
running their processors, and sees the rest of the Worker through `LockContext`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from psyq.core.job import Job, QueueRef
from psyq.core.parts import PartContext
from psyq.core.settle import log
from psyq.errors import LockError, UnrecoverableError

__all__ = ["RENEW_LOCK", "LockContext", "Locks"]

# LockError.operation of a lock the worker could not renew (the lock was lost)
RENEW_LOCK = "renew the lock of"


class LockContext(PartContext, Protocol):
    """What the locks part sees of its Worker."""

    @property
    def stalled_interval(self) -> int: ...

    @property
    def max_stalled_count(self) -> int: ...

    @property
    def _is_async(self) -> bool:
        """Whether the processor runs on the loop (a cancelled job's task is cancelled)."""

    async def _notify(self, hook: str, **kwargs: Any) -> None: ...

    async def _queue_ref(self) -> QueueRef: ...


class Locks:
    """Renews, checks and recovers the locks of a Worker's jobs."""

    def __init__(
        self,
        worker: LockContext,
        active: Mapping[str, Job],
        in_processor: Mapping[str, asyncio.Task[Any] | None],
    ) -> None:
        self._worker = worker
        self._active = active  # job id -> the worker's active job
        self._in_processor = in_processor  # job id -> the task running its processor
        self.renewals_after_settle = 0  # renewals that crossed their job's own settle

    async def extend(self) -> list[str]:
        """Renew the locks of every active job now; returns the ids whose lock was lost."""
        if not self._active:
            return []
        worker = self._worker
        ref = await worker._queue_ref()
        locks = {job.id: job.token or "" for job in self._active.values()}
        lost = await ref.backend.extend_locks(worker.name, locks, worker.lock_duration)
        for job_id in lost:
            self._lost(job_id)
        return lost

    def _lost(self, job_id: str) -> None:
        """A lock the store did not renew. Lost while the processor runs, the job may run
        elsewhere too: an `error`. Lost after the processor returned, the renewal only
        crossed the job's own settle (the store finished it first): no failure, counted
        and logged at debug; if the settle itself is refused, it reports that."""
        if job_id in self._in_processor:
            self._worker.emit("error", LockError(job_id, RENEW_LOCK, "the lock was lost"))
            return
        self.renewals_after_settle += 1
        name = self._worker.name
        log.debug("renewal of job %r of %r crossed its settle: not renewed", job_id, name)

    async def check_stalled(self) -> list[str]:
        """Move jobs whose lock expired back to waiting (or fail them); returns the ids."""
        worker = self._worker
        ref = await worker._queue_ref()
        result = await ref.backend.move_stalled_jobs_to_wait(
            worker.name, worker.max_stalled_count, worker.stalled_interval
        )
        for job_id in result.stalled + result.failed:
            worker.emit("stalled", job_id, "active")
            await worker._notify("psyq_job_stalled", queue_name=worker.name, job_id=job_id)
        for job_id in result.failed:
            await self._stalled_too_often(ref, job_id)
        return result.stalled + result.failed

    async def _stalled_too_often(self, ref: QueueRef, job_id: str) -> None:
        """A job the check failed for stalling more than max_stalled_count: `failed` with
        the job and an UnrecoverableError of its failed reason, as Node BullMQ's worker
        emits it (a job its removeOnFail removed at once cannot be read: no event)."""
        record = await ref.backend.get_job(ref.name, job_id)
        if record is None:
            return
        job = Job(ref, record)
        error = UnrecoverableError(record.failed_reason or "")
        self._worker.emit("failed", job, error)
        await self._worker._notify("psyq_job_failed", job=job, error=error)

    async def check_cancelled(self) -> list[str]:
        """Stop the active jobs that `queue.cancel_job` marked; returns their ids."""
        if not self._active:
            return []
        ref = await self._worker._queue_ref()
        marked = await ref.backend.get_cancelled(self._worker.name, list(self._active))
        for job_id, reason in marked.items():
            job = self._active.get(job_id)
            if job is None or job._cancelled is not None:
                continue
            job._cancelled = reason
            task = self._in_processor.get(job_id)
            if task is not None and self._worker._is_async:
                task.cancel()
        return list(marked)
