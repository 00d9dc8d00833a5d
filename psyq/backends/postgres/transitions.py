"""Fetching, settling (with fetch-next in the same statement), locks and stalls, each one
statement over the layout's functions (move_to_active, move_to_completed, move_to_failed,
retry_job, move_to_delayed, move_active_to_wait, move_stalled_jobs_to_wait)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import asyncpg

from psyq.backends.base import (
    Completed,
    ErrorCode,
    Failed,
    FetchRequest,
    JobRecord,
    Retry,
    Settlement,
    StalledResult,
    raise_for_code,
)
from psyq.backends.postgres.connection import (
    LayoutCode,
    settle_error,
    translate,
)
from psyq.backends.postgres.fastpath import FastPath, HeldTokens, Taken, worker_keep
from psyq.backends.postgres.listen import EVENTS_CHANNEL, JOBS_CHANNEL
from psyq.backends.postgres.locks import finishing_locks
from psyq.errors import PsyqError

__all__ = ["Transitions"]


def _limits(fetch: FetchRequest) -> tuple[int | None, int | None]:
    limiter = fetch.limiter
    return (None, None) if limiter is None else (limiter.max, limiter.duration)


CHANNELS = (JOBS_CHANNEL, EVENTS_CHANNEL)
# How long a worker waits before taking again when a waiting job's row is held by a take of
# another process (about one take statement; a job notification ends it sooner).
HELD_WAIT_S = 0.005
log = logging.getLogger("psyq.postgres")


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


# A batch's finished-job count whose row id is a multiple of this folds the queue's counts
# into the layout's metrics rows (which Node reads); psyq's get_metrics folds first.
FOLD_EVERY = 64


def _take_args(queue: str, fetch: FetchRequest) -> list[Any]:
    """The `transitions.take` parameters of a fetch."""
    return [queue, list(fetch.tokens), fetch.lock_duration, fetch.worker_name, *_limits(fetch)]


def _trims(items: Iterable[Settlement]) -> set[str]:
    """The kinds of finished jobs the worker's own options trim by count or age when these
    settle (`locks.finishing_locks`; a job's own options are read by the statement)."""
    return {
        "completed" if isinstance(item.outcome, Completed) else "failed"
        for item in items
        if isinstance(item.outcome, Completed | Failed)
        and not isinstance(item.outcome.keep, bool)
        and isinstance(item.outcome.keep, int | dict)
    }


def _settle_call(queue: str, item: Settlement, count: bool = True) -> tuple[str, str, list[Any]]:
    """(statement, operation, parameters) that settle one job; `count`: in the metrics."""
    outcome, head = item.outcome, [queue, item.job_id, item.token]
    if isinstance(outcome, Completed):
        keep = worker_keep(outcome)
        return "transitions.complete", "complete", [*head, outcome.returnvalue, count, keep]
    stack = json.dumps(list(outcome.stacktrace))
    if isinstance(outcome, Failed):
        keep = worker_keep(outcome)
        return "transitions.fail", "fail", [*head, outcome.reason, stack, count, keep]
    if outcome.delay > 0:
        return "transitions.retry_later", "retry", [*head, outcome.delay, outcome.reason, stack]
    return "transitions.retry_now", "retry", [*head, outcome.reason, stack]


class Transitions(FastPath):
    """Moves jobs through their states: plain jobs through psyq's set-based statements
    (fastpath.py), the rest through the layout's functions."""

    batch_settles = True

    def __init__(self, url: str) -> None:
        super().__init__(url)

    # ------------------------------------------------------------------ fetching
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        """Take up to one job per token. A take that finds no other job waiting leaves a
        job notification's future behind, registered before the take was sent: until it
        is woken (or the next delayed job is due) the next take returns nothing without
        asking the server, and wait_for_job waits on it without asking ready_in (a
        worker's fetcher takes again at once after every take that found jobs, then asked
        ready_in before it waited: two round trips per job for nothing)."""
        if not request.tokens or self._still_idle(queue):
            return []
        taken = await self._take_noting_idle(queue, [], request)
        return await self._delivered(queue, taken, request)

    async def _take_noting_idle(
        self, queue: str, done: Sequence[Settlement], fetch: FetchRequest | None
    ) -> Taken:
        """fast.settle_take for `done` and `fetch`, leaving the queue's idle mark when it
        took and found no other job waiting (see move_to_active)."""
        if fetch is None or not fetch.tokens:
            return await self._settle_take(queue, done, fetch)
        woken = self.listener.register(JOBS_CHANNEL, queue)
        self._forget_idle(queue)
        try:
            taken = await self._settle_take(queue, done, fetch)
        except BaseException:
            self.listener.discard(JOBS_CHANNEL, queue, woken)
            raise
        if taken.idle and not woken.done():
            self._forget_idle(queue)  # another take of the queue may have left one meanwhile
            due = None if taken.next_ms is None else _loop_time() + max(taken.next_ms, 0) / 1000
            self._idle[queue] = (woken, due)
        else:
            self.listener.discard(JOBS_CHANNEL, queue, woken)
        return taken

    def _still_idle(self, queue: str) -> bool:
        """The last take found no other job waiting, no job was announced since (nor added
        by this process: FastPath._made_waiting), and no delayed job is due yet."""
        idle = self._idle.get(queue)
        if idle is None:
            return False
        woken, due = idle
        if woken.done() or (due is not None and _loop_time() >= due):
            self._forget_idle(queue)
            return False
        return True

    def _forget_idle(self, queue: str) -> None:
        """Drop the queue's idle mark; whoever still waits on it is woken (and takes)."""
        idle = self._idle.pop(queue, None)
        if idle is not None:
            self.listener.discard(JOBS_CHANNEL, queue, idle[0])
            if not idle[0].done():
                idle[0].set_result(None)

    async def _delivered(
        self, queue: str, taken: Taken, fetch: FetchRequest | None
    ) -> list[JobRecord]:
        """The jobs a fast statement took, or, where it could not take, the layout's take;
        the batch's finished count folded into the layout's metrics when due."""
        if taken.counted is not None and taken.counted % FOLD_EVERY == 0:
            await self._fold(queue)
        rows = [*taken.held.rows, *taken.rows]
        rest = taken.held.rest(fetch)
        if taken.fallback and rest is not None:
            rows += await self._take(queue, rest)
        return await self._deliverable(queue, self._records(queue, rows), rows)

    async def _take(self, queue: str, fetch: FetchRequest) -> list[asyncpg.Record]:
        """The layout's take for `fetch`; sent again after a lost connection, it first
        collects what the lost attempt took (HeldTokens)."""
        held = HeldTokens(queue, fetch.tokens)

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            request = held.rest(fetch)
            if request is None or not held.tokens:
                return []
            args = _take_args(queue, request)
            rows: list[asyncpg.Record] = await conn.fetch(self._q["transitions.take"], *args)
            return rows

        rows = await self._on_connection(run, self._recover_into(held))
        return [*held.rows, *rows]

    async def _deliverable(
        self, queue: str, records: list[JobRecord], rows: list[asyncpg.Record]
    ) -> list[JobRecord]:
        """Jobs taken with a deferred failure (the layout's mark for a job that stalled
        too often or whose failParentOnFailure child failed) fail now, as BullMQ's workers
        fail them, instead of running."""
        await self._after_take(queue, rows)
        kept = []
        for record, row in zip(records, rows, strict=True):
            reason = row["deferred_failure"]
            if reason is None:
                kept.append(record)
                continue
            stack = json.dumps(list(record.stacktrace))
            args = (queue, record.id, record.lock_token, reason, stack, True, None)
            try:
                await self._settle("transitions.fail", queue, record.id, "fail", *args)
            except PsyqError as exc:  # its lease ends and the stall check takes it back
                log.warning("psyq: could not fail job %r (%s): %s", record.id, reason, exc)
        return kept

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        """Until a job may be ready: a job notification of the queue, or the time
        `ready_in` gives; at its global concurrency, an event of the queue too (a finishing
        job frees a slot, which the layout announces as an event only)."""
        if self._still_idle(queue):
            idle = self._idle[queue]
            woken_job, due = idle
            left = timeout_ms if due is None else min(timeout_ms, (due - _loop_time()) * 1000)
            try:
                await self.listener.wait(woken_job, int(left))
            finally:
                if self._idle.get(queue) is idle:
                    self._forget_idle(queue)
            return
        woken = [self.listener.register(channel, queue) for channel in CHANNELS]
        try:
            ready = await self._value("transitions.ready_in", queue)
            if ready == 0:
                # a job is waiting that the caller's take did not get: most often one whose
                # row another take holds until it commits; asking again at once spun (20
                # empty takes in a row behind one slow statement). A take of this process:
                # until it ends; another process's: a short while (or a job notification)
                under_way = self._taking.get(queue) or set()
                await asyncio.wait(
                    {*under_way, woken[0]},
                    timeout=timeout_ms / 1000 if under_way else HELD_WAIT_S,
                    return_when="FIRST_COMPLETED",
                )
                return
            if ready == -1:
                await self.listener.wait_any(woken, timeout_ms)
            else:
                wait = timeout_ms if ready is None else min(timeout_ms, int(ready))
                await self.listener.wait(woken[0], wait)
        finally:
            for channel, future in zip(CHANNELS, woken, strict=True):
                self.listener.discard(channel, queue, future)

    # ------------------------------------------------------------------ settling
    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        """Settle one job (`Job.move_to_completed`, with the caller's own token, which
        fetch-next takes with too). Sent again after a lost connection, a completion whose
        lost attempt committed (the job completed, jobs taken after it under the tokens:
        transitions.held_after) returns those jobs instead of the refusal the job, no
        longer active, gets."""
        settlement = Settlement(job_id, token, outcome)
        if isinstance(outcome, Completed):
            taken = await self._settle_take(queue, [settlement], fetch, job_id)
            if not taken.left:  # else it took nothing: the layout settles (or refuses)
                return await self._delivered(queue, taken, fetch)
            if taken.held.rows:  # the lost attempt completed the job and took these
                rest = taken.held.rest(fetch)
                early = await self._delivered(queue, taken, None)
                return early + (await self.move_to_active(queue, rest) if rest else [])
        if isinstance(outcome, Completed) and fetch is not None and fetch.tokens:
            rows = await self._complete_take(queue, settlement, outcome, fetch)
            return await self._deliverable(queue, self._records(queue, rows), rows)
        name, operation, args = _settle_call(queue, settlement)
        await self._settle(name, queue, job_id, operation, *args, trims=_trims([settlement]))
        return await self.move_to_active(queue, fetch) if fetch is not None else []

    async def _complete_take(
        self, queue: str, item: Settlement, outcome: Completed, fetch: FetchRequest
    ) -> list[asyncpg.Record]:
        """The layout's completion and take in one statement (transitions.complete_take);
        sent again after a lost connection, it first collects what the lost attempt took
        (HeldTokens, anchored on the job's completion): then that attempt did it all."""
        held = HeldTokens(queue, fetch.tokens, item.job_id)

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            if held.rows:
                return []
            args = [*_take_args(queue, fetch)[1:], worker_keep(outcome)]
            statement = self._q["transitions.complete_take"]
            head = (queue, item.job_id, item.token, outcome.returnvalue)
            async with conn.transaction():
                locks = finishing_locks(queue, [item.job_id], _trims([item]))
                await self._take_locks(conn, locks)
                rows: list[asyncpg.Record] = await conn.fetch(statement, *head, *args)
            return rows

        try:
            rows = await self._on_connection(run, self._recover_into(held))
        except LayoutCode as exc:
            raise settle_error(exc, queue, item.job_id, "complete") from exc
        return [*held.rows, *rows]

    async def complete_in(
        self, transaction: object, queue: str, job_id: str, token: str, outcome: Completed
    ) -> None:
        """The worker's completion (transitions.complete, its locks first) on the
        application's transaction: the layout's move_to_completed locks the job's row and
        checks `token` there, so a job taken from this worker meanwhile raises LockError
        and the application's transaction fails with it."""
        settlement = Settlement(job_id, token, outcome)
        name, operation, args = _settle_call(queue, settlement)
        async with self._in_transaction(transaction) as on:
            trims = _trims([settlement])
            await self._settle(name, queue, job_id, operation, *args, trims=trims, on=on)

    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        name, operation, args = _settle_call(queue, Settlement(job_id, token, outcome))
        await self._settle(name, queue, job_id, operation, *args)

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        """Completions and the take in one statement (fast.settle_take); what it leaves
        (failures, retries, flows, deduplication, refusals), through the layout's
        functions in one transaction (_settle_in_layout)."""
        if not settlements or not all(isinstance(s.outcome, Completed) for s in settlements):
            return await self._settle_in_layout(queue, settlements, fetch)
        taken = await self._take_noting_idle(queue, settlements, fetch)
        if not taken.left:
            return [None] * len(settlements), await self._delivered(queue, taken, fetch)
        left = set(taken.left)  # the statement then took nothing
        rest = [item for item in settlements if item.job_id in left]
        early = await self._delivered(queue, taken, None) if taken.held.rows else []
        found, records = await self._settle_in_layout(queue, rest, taken.held.rest(fetch))
        errors = dict(zip([item.job_id for item in rest], found, strict=True))
        return [errors.get(item.job_id) for item in settlements], early + records

    async def _settle_in_layout(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        """Every settlement in one transaction (one commit): the completions in one
        statement when none is refused, else each settlement in a savepoint so a refused
        one is undone alone and reported; then the metrics, once per kind, and the take for
        `fetch`."""
        calls = [_settle_call(queue, item, count=False) for item in settlements]
        done = [item for item in settlements if isinstance(item.outcome, Completed)]
        failed = sum(isinstance(item.outcome, Failed) for item in settlements)
        held = HeldTokens(queue, fetch.tokens if fetch is not None else [])

        fold = False

        async def run(conn: asyncpg.Connection) -> tuple[list[Any], list[asyncpg.Record]]:
            nonlocal fold
            async with conn.transaction():
                ids = [item.job_id for item in settlements]
                await self._take_locks(conn, finishing_locks(queue, ids, _trims(settlements)))
                errors = await self._settle_in(conn, queue, settlements, calls, done)
                finished = {"completed": 0, "failed": failed}
                for error, item in zip(errors, settlements, strict=True):
                    if error is None and isinstance(item.outcome, Completed):
                        finished["completed"] += 1
                    elif error is not None and isinstance(item.outcome, Failed):
                        finished["failed"] -= 1
                for kind, jobs in finished.items():
                    if jobs:
                        counted = await conn.fetchval(
                            self._q["transitions.count"], queue, kind, jobs
                        )
                        fold = fold or counted % FOLD_EVERY == 0
                rows: list[asyncpg.Record] = []
                request = held.rest(fetch)
                if request is not None and held.tokens:
                    args = _take_args(queue, request)
                    rows = await conn.fetch(self._q["transitions.take"], *args)
            return errors, [*held.rows, *rows]

        found, rows = await self._on_connection(run, self._recover_into(held))
        self._made_waiting(queue)  # retries, parents let go
        if fold:
            await self._fold(queue)
        errors: list[PsyqError | None] = [
            None if error is None else settle_error(error, queue, item.job_id, operation)
            for error, item, (_name, operation, _args) in zip(
                found, settlements, calls, strict=True
            )
        ]
        return errors, await self._deliverable(queue, self._records(queue, rows), rows)

    async def _settle_in(
        self,
        conn: asyncpg.Connection,
        queue: str,
        settlements: Sequence[Settlement],
        calls: list[tuple[str, str, list[Any]]],
        done: list[Settlement],
    ) -> list[Any]:
        """Settle in the open transaction; one LayoutCode (or None) per settlement."""
        if len(done) == len(settlements) > 1:
            try:
                async with conn.transaction():
                    await conn.fetch(
                        self._q["transitions.complete_many"],
                        queue,
                        [item.job_id for item in done],
                        [item.token for item in done],
                        [item.outcome.returnvalue for item in done],  # type: ignore[union-attr]
                        [worker_keep(item.outcome) for item in done],
                    )
                return [None] * len(settlements)
            except asyncpg.PostgresError as exc:
                if not isinstance(translate(exc, self.url), LayoutCode):
                    raise
        errors: list[Any] = []
        for name, _operation, args in calls:
            try:
                async with conn.transaction():
                    await conn.fetch(self._q[name], *args)
            except asyncpg.PostgresError as exc:
                error = translate(exc, self.url)
                if not isinstance(error, LayoutCode):
                    raise
                errors.append(error)
            else:
                errors.append(None)
        return errors

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
        self._made_waiting(queue)

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
                await self._rows_in_order(
                    finishing_locks(queue, [row["id"]]),
                    "transitions.fail",
                    queue,
                    row["id"],
                    "0",
                    "job stalled more than allowable limit",
                    "[]",
                    True,
                    None,  # the job's own removeOnFail only
                )
                result.failed.append(row["id"])
        if result.stalled:
            self._made_waiting(queue)
        return result
