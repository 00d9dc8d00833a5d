"""`SettleBatch`: a worker's completions of one event-loop turn, settled in one call (or a
few, sent together: `BackendAdapter.settle_groups`). The worker's part that uses it is
`Settling` (psyq.core.settling).

On a store across the network (Redis, Postgres, psyq://) every `move_to_finished` is a round
trip. A worker with many slots finishes many jobs in the same turn of the event loop; the
batch sends them as one `settle_many` call that also fetches the next job for every slot
that wants one, and hands each slot its own outcome and next job. Backends that settle in
process (memory, SQLite) gain nothing from it and are called directly.

A backend with a `settle_linger_ms` lets a completion wait instead, while the worker's last
take found no other job waiting: the slot is free at once, and the completion rides on the
next call that goes to the store anyway (the take the next job's arrival starts, or the next
batch), or goes alone when the linger runs out. A queue fed one job at a time then costs one
commit per job for its take and completion together, not two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from psyq.backends.base import BackendAdapter, FetchRequest, JobRecord, Settlement
from psyq.core.takes import LostTakes
from psyq.errors import ConnectionError, PsyqError

__all__ = ["SETTLE_GROUP_MIN", "SettleBatch", "Settled"]


@dataclass(slots=True)
class Settled:
    """One slot's share of a batch: the settle's error (None when it worked) and the job
    fetched for the slot (None when it asked for none or none was ready)."""

    error: PsyqError | None
    next_job: JobRecord | None


_Entry = tuple[Settlement, bool, "asyncio.Future[Settled]"]
SETTLE_GROUP_MIN = 5  # settles per call at least, when a backend splits batches


class SettleBatch:
    """The completions of one loop turn (and the deferred ones) of one queue, sent
    together; each slot awaits its own `Settled`."""

    def __init__(
        self,
        backend: BackendAdapter,
        queue: str,
        fetch_request: Callable[[int], FetchRequest],
        report: Callable[[BaseException], object],
    ) -> None:
        self._backend = backend
        self._queue = queue
        self._fetch_request = fetch_request  # n -> a request for n jobs with fresh tokens
        self._report = report  # the worker's `error` event
        self._pending: list[_Entry] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._deferred: list[_Entry] = []  # completions waiting for a call to ride on
        self._linger = backend.settle_linger_ms / 1000
        self._timer: asyncio.TimerHandle | None = None
        self._lost = LostTakes()  # the tokens of this batch's fetch-next whose reply was lost

    @property
    def lingers(self) -> bool:
        """Whether completions may wait for a call to ride on (the backend's linger)."""
        return self._linger > 0

    @property
    def deferring(self) -> bool:
        return bool(self._deferred)

    async def settle(self, settlement: Settlement, fetch: bool) -> Settled:
        """Settle one job with the others of this turn; `fetch`: also take a next job."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Settled] = loop.create_future()
        if not self._pending:  # the first of this turn: the call that sends them, started
            self._sending.add(asyncio.ensure_future(self._send_pending()))  # next turn, a task
        self._pending.append((settlement, fetch, future))
        return await future

    async def defer(self, settlement: Settlement) -> Settled:
        """Settle one completion with the next call that goes to the store (at most the
        backend's linger from the first one deferred)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Settled] = loop.create_future()
        if not self._deferred:
            self._timer = loop.call_later(self._linger, self.flush)
        self._deferred.append((settlement, False, future))
        return await future

    def flush(self) -> None:
        """Send the deferred completions now (the linger ran out, or the worker stops)."""
        deferred = self._take_deferred()
        if deferred:
            self._start(deferred)

    async def take(self, request: FetchRequest) -> list[JobRecord]:
        """The fetcher's take, with the deferred completions riding on it."""
        batch = self._take_deferred()
        errors, fetched = await self._call(batch, request)
        for (_, _, future), error in zip(batch, errors, strict=True):
            if not future.done():
                future.set_result(Settled(error, None))
        return fetched

    def _take_deferred(self) -> list[_Entry]:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deferred, self._deferred = self._deferred, []
        return deferred

    async def _send_pending(self) -> None:
        """The turn's settles, in the task started by the first: it sends the first group
        itself (one task per batch, no callback before it), each other group in its own."""
        try:
            batch, self._pending = [*self._pending, *self._take_deferred()], []
            groups = max(1, min(self._backend.settle_groups, len(batch) // SETTLE_GROUP_MIN))
            size = -(-len(batch) // groups)
            for start in range(size, len(batch), size):
                self._start(batch[start : start + size])
            await self._send(batch[:size])
        finally:  # the task lets go of itself: no done callback (a loop callback) per batch
            self._sending.discard(asyncio.current_task())

    def _start(self, batch: list[_Entry]) -> None:
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Entry]) -> None:
        wanted = 0
        for _, fetch, _ in batch:  # a loop, not sum() of a generator: a call per settle
            if fetch:
                wanted += 1
        request = self._lost.attach(self._fetch_request(wanted)) if wanted else None
        try:
            errors, fetched = await self._call(batch, request)
        except BaseException as exc:
            self._lost.failed(request)
            if not isinstance(exc, Exception):
                raise
            return
        records = iter(fetched)
        unclaimed: list[JobRecord] = []
        for (_, fetch, future), error in zip(batch, errors, strict=True):
            record = next(records, None) if fetch else None
            if future.done():  # the slot was cancelled (a forced close)
                unclaimed += [record] if record is not None else []
            else:
                future.set_result(Settled(error, record))
        await self._hand_back([*unclaimed, *records])

    async def _call(
        self, batch: list[_Entry], request: FetchRequest | None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        """settle_many for the batch; when the whole call fails every slot of it sees it."""
        try:
            return await self._backend.settle_many(
                self._queue, [settlement for settlement, _, _ in batch], request
            )
        except BaseException as exc:
            self._fail_all(batch, exc)
            raise

    def _fail_all(self, batch: list[_Entry], exc: BaseException) -> None:
        """Every slot waiting on the batch gets the failure. A CancelledError that escaped
        the store's client while this task was not cancelled reaches the slots as a lost
        connection (they retry); a slot must never wait for a batch that is gone."""
        if isinstance(exc, asyncio.CancelledError):
            exc = ConnectionError(self._backend.url, "the settle call was cancelled")
        elif not isinstance(exc, Exception):
            exc = PsyqError(f"a settle call ended by {exc!r}")
        for _, _, future in batch:
            if not future.done():
                future.set_exception(exc)

    async def _hand_back(self, records: list[JobRecord]) -> None:
        """Jobs fetched for slots that are gone go back to waiting at once."""
        for record in records:
            try:
                await self._backend.move_job_from_active_to_wait(
                    self._queue, record.id, record.lock_token or ""
                )
            except PsyqError as exc:  # it moved on (its lock expired): the stall check has it
                self._report(exc)
