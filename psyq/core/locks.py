"""`Locks`: the part of a Worker that keeps its active jobs' locks and watches them.

It renews the lock of every job the slots hold (`extend`, on the worker's lock timer) and
tells a lost lock from a renewal that only crossed the job's own settle; it stops the
active jobs that `queue.cancel_job` marked (`check_cancelled`); it moves jobs whose lock
expired back to waiting (`check_stalled`). It reads the `Slots` it is given (their active
jobs and the tasks running their processors) and writes nothing of theirs but a job's
cancel mark and a cancelled processor task; its own state is the count of renewals that
crossed their settle. Each call names the queue (`ref`): the part is tied to none.
"""

from __future__ import annotations

from psyq.core.job import Job, QueueRef
from psyq.core.parts import Configured, Reports, log
from psyq.core.slots import Slots
from psyq.errors import LockError, UnrecoverableError

__all__ = ["RENEW_LOCK", "Locks"]

# LockError.operation of a lock the worker could not renew (the lock was lost)
RENEW_LOCK = "renew the lock of"


class Locks:
    """Renews, checks and recovers the locks of a Worker's jobs."""

    def __init__(self, config: Configured, slots: Slots, reports: Reports) -> None:
        self._config = config
        self._slots = slots
        self._reports = reports
        self.renewals_after_settle = 0  # renewals that crossed their job's own settle

    async def extend(self, ref: QueueRef) -> list[str]:
        """Renew the locks of every active job now; returns the ids whose lock was lost."""
        locks = {job.id: job.token or "" for job in self._slots.active.values()}
        duration = self._config.options.lock_duration
        lost = await ref.backend.extend_locks(ref.name, locks, duration)
        for job_id in lost:
            self._lost(ref.name, job_id)
        return lost

    def _lost(self, queue: str, job_id: str) -> None:
        """A lock the store did not renew. Lost while the processor runs, the job may run
        elsewhere too: an `error`. Lost after the processor returned, the renewal only
        crossed the job's own settle (the store finished it first): no failure, counted
        and logged at debug; if the settle itself is refused, it reports that."""
        if job_id in self._slots.in_processor:
            self._reports.emit("error", LockError(job_id, RENEW_LOCK, "the lock was lost"))
            return
        self.renewals_after_settle += 1
        log.debug("renewal of job %r of %r crossed its settle: not renewed", job_id, queue)

    async def check_stalled(self, ref: QueueRef) -> list[str]:
        """Move jobs whose lock expired back to waiting (or fail them); returns the ids."""
        options, reports = self._config.options, self._reports
        result = await ref.backend.move_stalled_jobs_to_wait(
            ref.name, options.max_stalled_count, options.stalled_interval
        )
        for job_id in result.stalled + result.failed:
            reports.emit("stalled", job_id, "active")
            await reports.notify("psyq_job_stalled", queue_name=ref.name, job_id=job_id)
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
        self._reports.emit("failed", job, error)
        await self._reports.notify("psyq_job_failed", job=job, error=error)

    async def check_cancelled(self, ref: QueueRef) -> list[str]:
        """Stop the active jobs that `queue.cancel_job` marked; returns their ids. A job
        whose processor runs on the loop has its task cancelled; one in a thread sees its
        mark when it returns."""
        active = self._slots.active
        marked = await ref.backend.get_cancelled(ref.name, list(active))
        for job_id, reason in marked.items():
            job = active.get(job_id)
            if job is None or job._cancelled is not None:
                continue
            job._cancelled = reason
            task = self._slots.in_processor.get(job_id)
            if task is not None:
                task.cancel()
        return list(marked)
