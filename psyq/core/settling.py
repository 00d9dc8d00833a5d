"""`Settling`: the part of a Worker that settles the jobs it ran.

A settle is tried again while the store cannot be reached, for at most one lock duration.
Completions go in the loop turn's `SettleBatch` (psyq.core.settle_batch) on a backend that
batches, taking the slot's next job in the same call (fetch-next); while the last take
found no other job waiting they may wait in the batch for a call to ride on (`defer`),
the slot free at once. A failure becomes a retry or a final failure (failure_outcome); a
completion a flow refused fails the job. The part owns the batch, the deferred
completions and the count of retried settles. It is given the worker's options
(`Configured`), the slots it frees (`Slots`), the takes it asks and marks (`Takes`, shared
with the fetching part, which it never calls) and a way to report (`Reports`).
"""

from __future__ import annotations

import asyncio
import json
import time
from functools import partial
from typing import TypeGuard

from psyq.backends.base import (
    CHILDREN_PENDING,
    BackendAdapter,
    Completed,
    Failed,
    Retry,
    Settlement,
)
from psyq.core.job import Job, QueueRef, failure_outcome, settle_failure
from psyq.core.parts import Configured, Reports, log
from psyq.core.settle_batch import SettleBatch
from psyq.core.slots import Slots
from psyq.core.takes import Take, Takes
from psyq.errors import ConnectionError, JobStateError, LockError, PsyqError
from psyq.rules.reconnect import Reconnect

__all__ = ["Outcome", "Settling", "completed_earlier"]

Outcome = Completed | Failed | Retry
READ_TRIES = 5  # completed_earlier's reads of the job while the store cannot be reached


class Settling:
    """How a Worker settles the jobs it ran: a settle is tried again while the store cannot
    be reached; completions go in the loop turn's batch, taking the slot's next job in the
    same call (fetch-next), or, while the last take found no other job waiting, wait in the
    batch for a call to ride on (`defer`) while the slot takes its next job."""

    def __init__(self, config: Configured, slots: Slots, takes: Takes, reports: Reports) -> None:
        self._config = config
        self._slots = slots
        self._takes = takes
        self._reports = reports
        self._emit = reports.emit
        # a worker's plugins are fixed: whether one hears every completion, found once
        self._on_completed = reports.has_hook("psyq_job_completed")
        self._batch: SettleBatch | None = None  # completions batched per loop turn
        self._deferred: dict[str, asyncio.Task[None]] = {}  # job id -> its deferred settle
        self.retries = 0  # settles sent again after the store could not be reached

    def flush(self) -> None:
        """Send the deferred completions now (the worker pauses or stops)."""
        if self._batch is not None:
            self._batch.flush()

    def riding_take(self) -> Take | None:
        """The batch's take, while completions wait in it for a call to ride on."""
        batch = self._batch
        return batch.take if batch is not None and batch.deferring else None

    def deferred(self, job_id: str) -> bool:
        """Whether the job has run and its completion waits to be settled."""
        return job_id in self._deferred

    async def wait_deferred(self) -> None:
        """Until every deferred completion is settled (or has failed)."""
        await asyncio.gather(*self._deferred.values(), return_exceptions=True)

    def defers(self, ref: QueueRef, outcome: Outcome) -> bool:
        """Whether this completion may wait for a call to ride on, its slot free at once."""
        return (
            isinstance(outcome, Completed)
            and self._takes.short
            and ref.backend.batch_settles
            and self._settle_batch(ref).lingers
            and self._slots.taking_next()
        )

    def settle_later(self, ref: QueueRef, job: Job, outcome: Completed) -> None:
        """Settle a deferred completion beside the slots; the job stays active (its lock
        renewed, close waits for it) until it is settled."""

        async def settle() -> None:
            try:
                await self.settle(ref, job, outcome, None, defer=True)
            finally:
                self._deferred.pop(job.id, None)
                self._slots.done(job)

        self._deferred[job.id] = asyncio.ensure_future(settle())

    async def settle(
        self,
        ref: QueueRef,
        job: Job,
        outcome: Outcome,
        error: BaseException | None,
        defer: bool = False,
    ) -> Job | None:
        """Settle the job; while the backend cannot be reached the job stays active (its
        lock renewed) and the settle is retried with backoff, for at most one lock
        duration, after which the stall check hands the job out again."""
        give_up = 0.0
        backoff: Reconnect | None = None  # made on the first failure: most settles work
        while True:
            try:
                if isinstance(outcome, Completed):
                    return await self._complete(ref, job, job.token or "", outcome, defer)
                await self._fail(job, outcome, error)
                return None
            except ConnectionError as exc:
                if backoff is None:
                    duration = self._config.options.lock_duration / 1000
                    give_up, backoff = time.monotonic() + duration, Reconnect()
                if self._slots.forced or time.monotonic() >= give_up:
                    self._emit("error", exc)  # given up: the stall check hands the job out
                    return None
                self.retries += 1  # a retry that may well succeed
                log.debug("settle of job %r of %r retried: %s", job.id, ref.name, exc)
                backoff.failed()
                await backoff.wait()
            except Exception as exc:  # a refused settle, or a fault in the store's client:
                self._emit("error", exc)  # the job stays active; the stall check recovers it
                return None

    async def _fail(self, job: Job, outcome: Failed | Retry, error: BaseException | None) -> None:
        """Settle a failed attempt (a retry or a final failure) and report it."""
        await settle_failure(job, job.token or "", outcome)
        await self._report_failure(job, outcome, error)

    async def _complete(
        self, ref: QueueRef, job: Job, token: str, outcome: Completed, defer: bool
    ) -> Job | None:
        """Complete the job (fetching the next one unless closing or deferred); returns
        that next job."""
        fetch = self._slots.taking_next()
        defer = defer and fetch
        error: PsyqError | None = None
        if ref.backend.batch_settles:
            batch = self._settle_batch(ref)
            settling = Settlement(job.id, token, outcome, job.processed_on)
            settled = await (batch.defer(settling) if defer else batch.settle(settling, fetch))
            error, records = settled.error, [settled.next_job] if settled.next_job else []
        else:
            request = self._takes.request(1) if fetch else None
            try:
                records = await ref.backend.move_to_finished(
                    ref.name, job.id, token, outcome, request
                )
            except (LockError, JobStateError) as refused:  # as settle_many reports them
                error, records = refused, []
        if fetch and not defer:
            self._takes.took_next(bool(records))
        if error is not None and await completed_earlier(
            ref.backend, ref.name, job, outcome, error
        ):
            error = None  # an earlier attempt's reply was lost: that attempt completed it
        if error is None:
            await self.completed(job, outcome)
        elif _children_pending(error):
            await self._fail_refused(ref, job, error)
        else:
            self._emit("error", error)
        if records:
            self._takes.found_work()
            return Job(ref, records[0])
        return None

    async def _fail_refused(self, ref: QueueRef, job: Job, error: JobStateError) -> None:
        """A completion refused because a flow gave the job a child while it ran fails the
        job with that refusal, as Node BullMQ's worker does (attempts apply): the job ran,
        and its outcome is `failed`, not a worker `error`."""
        await self._fail(job, self._failure(ref, job, error), error)

    def _failure(self, ref: QueueRef, job: Job, error: BaseException) -> Failed | Retry:
        keep = self._config.options.remove_on_fail
        return failure_outcome(job, error, ref.backoff_strategies, keep)

    async def completed(self, job: Job, outcome: Completed) -> None:
        """The job completed: its return value set, `completed` emitted, plugins told."""
        job._returnvalue_json = outcome.returnvalue
        job.attempts_made += 1
        result = job.returnvalue
        self._emit("completed", job, result)
        if self._on_completed:
            await self._reports.notify("psyq_job_completed", job=job, result=result)

    def _settle_batch(self, ref: QueueRef) -> SettleBatch:
        if self._batch is None:
            report = partial(self._emit, "error")
            self._batch = SettleBatch(ref.backend, ref.name, self._takes.request, report)
        return self._batch

    async def _report_failure(
        self, job: Job, outcome: Failed | Retry, error: BaseException | None
    ) -> None:
        error = error or PsyqError(outcome.reason)
        self._emit("failed", job, error)
        if isinstance(outcome, Retry):
            await self._reports.notify(
                "psyq_job_retried", job=job, error=error, delay=outcome.delay
            )
        else:
            await self._reports.notify("psyq_job_failed", job=job, error=error)

    async def after_complete_in(self, ref: QueueRef, job: Job, outcome: Completed) -> Job | None:
        """The processor completed its job on its own transaction (Job.complete_in) and
        returned: the job is not settled again. Still active under this worker's lock, the
        transaction did not commit (rolled back, or left open): the attempt fails, retried
        by the job's attempts and backoff; taken by another worker meanwhile, it is
        theirs; gone or finished, it completed. Unreadable: the stall check recovers it."""
        try:
            record = await ref.backend.get_job(ref.name, job.id)
        except Exception as exc:
            self._emit("error", exc)
            return None
        if record is None or record.state == "completed":
            await self.completed(job, outcome)
            return None
        if record.state == "active" and record.lock_token == job.token:
            error = PsyqError(
                f"job {job.id!r}: the transaction given to complete_in did not commit "
                "before the processor returned"
            )
            return await self.settle(ref, job, self._failure(ref, job, error), error)
        return None


def _children_pending(error: PsyqError) -> TypeGuard[JobStateError]:
    """Whether a completion was refused for a child still pending (ErrorCode -4)."""
    return isinstance(error, JobStateError) and error.state == CHILDREN_PENDING


async def completed_earlier(
    backend: BackendAdapter, queue: str, job: Job, outcome: Completed, error: PsyqError | None
) -> bool:
    """Whether a completion the store refused (the job no longer active under its token)
    was done by an earlier attempt of this same settle, one whose reply was lost with its
    connection and which was then sent again (by the backend, or by the worker's retry).
    So it was when the job is now completed under the same lease: started as many times,
    at the same time (each take counts a start and stamps processedOn, so no other take
    came between), with this outcome's value. A job its retention already removed cannot
    be told apart: the refusal then stands. The job is read again while the store cannot
    be reached (a few times, with backoff): the question comes right after a lost
    connection, and a wrong no reports a completed job as refused."""
    if not isinstance(error, (LockError, JobStateError)):
        return False
    backoff = Reconnect()
    for _ in range(READ_TRIES):
        try:
            record = await backend.get_job(queue, job.id)
            if record is None:
                return False
            state = record.state or await backend.get_state(queue, job.id)
            break
        except ConnectionError:
            backoff.failed()
            await backoff.wait()
        except PsyqError:
            return False
    else:
        return False
    return (
        state == "completed"
        and record.attempts_started == job.attempts_started
        and record.processed_on == job.processed_on
        and _same_json(record.returnvalue, outcome.returnvalue)
    )


def _same_json(stored: str | None, sent: str) -> bool:
    """The same JSON value (a store may write it back spaced otherwise: jsonb)."""
    if stored is None:
        return False
    try:
        return bool(json.loads(stored) == json.loads(sent))
    except ValueError:
        return stored == sent
