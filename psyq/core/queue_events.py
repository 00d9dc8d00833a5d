"""`QueueEvents`: a queue's event feed, across processes, with BullMQ's event names.

    events = psyq.QueueEvents("emails")
    events.on("completed", lambda args, event_id: print(args["jobId"], args["returnvalue"]))
    async for event, args, event_id in events: ...

Events: added, waiting, active, progress, completed, failed, delayed, removed, stalled,
drained, paused, resumed, cleaned, deduplicated, duplicated, retries-exhausted,
waiting-children. `args` carry BullMQ's field names (jobId, returnvalue, failedReason, prev,
data, delay, ...); `returnvalue` and progress `data` arrive decoded from JSON. Reading starts
after `last_event_id` ("$": only new events; "0": the whole kept log; or an id seen before).
"$" is resolved to the newest event's id before the first read, so an event added between
two reads that found nothing is still delivered; `await events.wait_until_ready()` returns
once that starting point is fixed.

On the engine (memory://, sqlite:///, psyq://) an id's number counts the queue's
events; when a server's history starts again (a `--data memory` server restarted, or a
buffered one killed), its new events come after the reader's id all the same (ids are
ordered by time first, as Redis's are), and the reader logs once that the numbers went back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from psyq.backends.base import BackendAdapter
from psyq.core.events import EventEmitter
from psyq.core.queue import _BackendUser
from psyq.errors import (
    InvalidOptionsError,
    JobFailedError,
    JobNotFoundError,
    UnsupportedError,
)
from psyq.rules import codec
from psyq.rules.limits import check_int
from psyq.rules.prefix import DEFAULT_PREFIX
from psyq.rules.reconnect import Reconnect

__all__ = ["QueueEvents"]

log = logging.getLogger("psyq")

Event = tuple[str, dict[str, Any], str]
_JSON_FIELDS = {"completed": "returnvalue", "progress": "data"}
_ITERATOR_BUFFER = 10_000


class QueueEvents(_BackendUser, EventEmitter):
    """Listen to a queue's events. Listeners get `(args, event_id)`."""

    def __init__(
        self,
        name: str,
        connection: str | BackendAdapter | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        last_event_id: str = "$",
        blocking_timeout: int = 10_000,
        autorun: bool = True,
    ) -> None:
        _BackendUser.__init__(self, name, connection, prefix)
        EventEmitter.__init__(self)
        self.last_event_id = last_event_id
        self.blocking_timeout = check_int("blocking_timeout", blocking_timeout, minimum=1)
        self._task: asyncio.Task[None] | None = None
        self._finished: dict[str, list[asyncio.Future[Any]]] = {}
        # Events wait here for `async for` (from the start, so none is missed before the
        # loop begins); when nobody iterates, the newest beyond 10,000 are not kept.
        self._stream: asyncio.Queue[Event] = asyncio.Queue()
        self._ready = asyncio.Event()
        self._restart_told = False
        if autorun:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise InvalidOptionsError(
                    "QueueEvents(autorun=True) needs a running event loop; create it in async "
                    "code or pass autorun=False and await events.run()"
                ) from None
            self._task = asyncio.ensure_future(self.run())

    async def __aenter__(self) -> QueueEvents:
        await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def run(self) -> None:
        """Read events until `close()`, emitting each to its listeners."""
        backend = await self._open()
        backoff = Reconnect()  # capped, jittered: 50 ms doubling to 2 s while reads fail
        while not self._closed:
            try:
                if not self._ready.is_set():
                    await self._fix_start(backend)
                batch = await backend.read_events(
                    self.name, self.last_event_id, 100, self.blocking_timeout
                )
            except Exception as exc:
                self.emit("error", exc)
                backoff.failed()
                await backoff.wait()
                continue
            backoff.succeeded()
            if batch and backend.event_ids_count and not self._restart_told:
                self._tell_restart(batch[0][0])
            for event_id, event, fields in batch:
                self.last_event_id = event_id
                self._dispatch(event, _decode(event, fields), event_id)

    def _tell_restart(self, first_id: str) -> None:
        """Log, once, that the event numbers went back: the store's history started again."""
        last = self.last_event_id
        if "-" in last and int(first_id.rpartition("-")[2]) <= int(last.rpartition("-")[2]):
            self._restart_told = True
            log.warning(
                "queue %r: event %s came after %s: the server's event history started again "
                "(a restart); reading from its new start",
                self.name,
                first_id,
                last,
            )

    async def _fix_start(self, backend: BackendAdapter) -> None:
        """Turn "$" into the newest event's id, then say the reader is ready. Left as "$",
        every read that found nothing would start again after whatever came meanwhile.
        The store is told first that a reader starts (a queue under Postgres's `when-read`
        event policy writes its events from then on)."""
        await backend.start_reading_events(self.name)
        if self.last_event_id == "$":
            with contextlib.suppress(UnsupportedError):  # without it, reads start at "$"
                self.last_event_id = await backend.newest_event_id(self.name)
        self._ready.set()

    async def wait_until_ready(self, timeout: float | None = None) -> None:
        """Return once reading has a fixed starting point (BullMQ's `waitUntilReady`):
        every event added after this returns is delivered. Needs `run()` going (autorun)."""
        await asyncio.wait_for(self._ready.wait(), timeout)

    def _dispatch(self, event: str, args: dict[str, Any], event_id: str) -> None:
        self.emit(event, args, event_id)
        if self._stream.qsize() < _ITERATOR_BUFFER:
            self._stream.put_nowait((event, args, event_id))
        if event in ("completed", "failed"):
            for future in self._finished.pop(str(args.get("jobId")), []):
                if not future.done():
                    future.set_result((event, args))

    async def __aiter__(self) -> AsyncIterator[Event]:
        """Yield (event, args, event_id) as they arrive (up to 10,000 buffered)."""
        while True:
            yield await self._stream.get()

    async def wait_job_finished(self, job_id: str, timeout: float | None = None) -> Any:
        """The job's return value once it completes; JobFailedError once it fails."""
        job_id = str(job_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiting = self._finished.setdefault(job_id, [])
        waiting.append(future)
        try:
            record = await (await self._open()).get_job(self.name, job_id)
            if record is None:
                raise JobNotFoundError(self.name, job_id)
            if record.state == "completed":
                return codec.loads(record.returnvalue)
            if record.state == "failed":
                raise JobFailedError(job_id, record.failed_reason or "")
            event, args = await asyncio.wait_for(future, timeout)
        finally:
            if future in waiting:
                waiting.remove(future)
            if not waiting:
                self._finished.pop(job_id, None)
        if event == "failed":
            raise JobFailedError(job_id, args.get("failedReason", ""))
        return args.get("returnvalue")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ready.set()  # nobody waits for a reader that will not start
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._wait_listeners()
        await self._release()


def _decode(event: str, fields: dict[str, Any]) -> dict[str, Any]:
    args = dict(fields)
    name = _JSON_FIELDS.get(event)
    if name is not None and isinstance(args.get(name), str):
        args[name] = codec.loads(args[name])
    return args
