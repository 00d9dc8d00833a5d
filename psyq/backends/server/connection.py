"""`ClientConnection`: one connection of a psyq:// client to its server — the asyncio
protocol that frames requests, pipelines them (ids matched to answers), batches lone adds
(`AddBatch`) and fails what is pending when the connection drops. `ServerBackend` (client.py)
keeps a pool of them and reconnects.

When the server says `bye` (protocol 4: it goes away cleanly) the connection sends what
this turn queued, then nothing more: it half-closes, so the server answers every request
sent, and `on_leave` tells its owner to take a new connection for the next calls."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any, cast

from psyq.backends.base import JobRecord, NewJob
from psyq.backends.server.adding import AddBatch
from psyq.backends.server.codec import decode, frame
from psyq.backends.server.framing import FrameBuffer
from psyq.backends.server.outbox import Outbox
from psyq.backends.server.protocol import MAX_FRAME_BYTES, ProtocolError
from psyq.errors import ConnectionError, PsyqError

__all__ = ["ClientConnection"]


class ClientConnection(asyncio.BufferedProtocol):
    """One connection to the server: requests out, answers matched to futures by id. Answers
    are received into the frame buffer's own memory (see FrameBuffer)."""

    def __init__(
        self, url: str, max_frame: int = MAX_FRAME_BYTES, closed: str = "the connection was closed"
    ) -> None:
        """`closed`: what a call pending when the connection closes is told."""
        self.url = url
        self.frames = FrameBuffer(max_frame)
        self.pending: dict[int, asyncio.Future[Any] | AddBatch] = {}
        self.transport: asyncio.Transport | None = None
        self.version = 1  # the protocol version the server agreed to in its hello answer
        self.batch: AddBatch | None = None  # the adds of this event-loop turn, not yet sent
        self._ids = itertools.count(1)
        self._loop = asyncio.get_running_loop()
        self._reason = closed
        self.lost: asyncio.Future[None] = self._loop.create_future()  # connection_lost ran
        self.leaving = False  # the server said bye: no more requests on this connection
        self.on_leave: Callable[[ClientConnection], object] | None = None  # told of a bye

    @property
    def alive(self) -> bool:
        transport = self.transport
        return transport is not None and not transport.is_closing() and not self.leaving

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: uvloop's has the methods of asyncio.Transport, not the class
        self.transport = cast(asyncio.Transport, transport)
        self.outbox = Outbox(self._write)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.lost.done():
            self.lost.set_result(None)
        reason = f"{self._reason} ({exc})" if exc else self._reason
        pending, self.pending = self.pending, {}
        if self.batch is not None:
            pending[0], self.batch = self.batch, None
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionError(self.url, reason))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            for body in self.frames.buffer_updated(nbytes):
                self._deliver(decode(body))
        except ProtocolError as exc:
            self._bad_frame(exc)
        else:
            self.outbox.flush_after_wakeups()

    def data_received(self, data: bytes) -> None:
        try:
            for body in self.frames.feed(data):
                self._deliver(decode(body))
        except ProtocolError as exc:
            self._bad_frame(exc)

    def _bad_frame(self, exc: ProtocolError) -> None:
        self._reason = f"the server sent a bad frame: {exc}"
        self.close()

    def _deliver(self, message: dict[str, Any]) -> None:
        future = self.pending.pop(message.get("id"), None)  # type: ignore[arg-type]
        if "err" in message:
            error = message["err"]
            if not isinstance(error, PsyqError):
                error = ProtocolError(f"the server sent a bad error value: {error!r:.80}")
            if future is None:  # the server refused the connection as a whole
                self._reason = f"the server closed the connection: {error}"
            elif not future.done():
                future.set_exception(error)
        elif future is None:
            if message.get("bye") is True:
                self._leave()
        elif type(future) is AddBatch or not future.done():
            future.set_result(message.get("ok"))  # an AddBatch answers the callers still waiting

    def _leave(self) -> None:
        """The server goes away (`bye`): send what this turn queued, then half-close; the
        calls pending are answered before the server closes."""
        if self.leaving:
            return
        self.outbox.flush()
        self.leaving = True
        transport = self.transport
        if transport is not None and not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()
        if self.on_leave is not None:
            self.on_leave(self)

    def request(self, op: str, args: list[Any]) -> tuple[int, asyncio.Future[Any]]:
        if not self.alive:
            raise ConnectionError(self.url, self._reason)
        request_id = next(self._ids)
        try:
            data = frame({"id": request_id, "op": op, "args": args})
        except (TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"{op}: cannot encode the arguments: {exc}") from None
        future: asyncio.Future[Any] = self._loop.create_future()
        self.pending[request_id] = future
        self._send(data)
        return request_id, future

    def add_jobs(self, queue: str, jobs: list[NewJob]) -> asyncio.Future[list[JobRecord]]:
        """An add_jobs call, joined to this turn's add_batch request (protocol 2). The
        caller checked that the connection is alive (`alive`)."""
        batch = self.batch
        if batch is None:
            batch = self.batch = AddBatch(self._loop)
            self.outbox.defer(self._frame_batch)
        future = self._loop.create_future()
        batch.calls.append((queue, jobs, future))
        return future

    def _frame_batch(self) -> bytes | None:
        """The add_batch request of this turn's adds, made as the outbox writes."""
        batch, self.batch = self.batch, None
        if batch is None or batch.done():
            return None  # nobody waits any more (cancelled callers)
        if self.transport is None or self.transport.is_closing() or self.leaving:  # not `alive`
            batch.set_exception(ConnectionError(self.url, self._reason))
            return None
        request_id = next(self._ids)
        one = batch.one_args(self.version) if self.version >= 3 else None
        try:
            if one is not None:
                data = frame({"id": request_id, "op": "add", "args": one})
                batch.one = True
            else:
                data = frame({"id": request_id, "op": "add_batch", "args": batch.args()})
        except (TypeError, ValueError, OverflowError):
            return self._frame_one_by_one(batch)
        self.pending[request_id] = batch
        return data

    def _frame_one_by_one(self, batch: AddBatch) -> bytes:
        """A batch that cannot be encoded: each call in its own request, so the calls whose
        arguments cannot be encoded get that error and the others go on."""
        frames: list[bytes] = []
        for queue, jobs, future in batch.calls:
            alone = AddBatch(self._loop)
            alone.calls.append((queue, jobs, future))
            request_id = next(self._ids)
            try:
                frames.append(frame({"id": request_id, "op": "add_batch", "args": alone.args()}))
            except (TypeError, ValueError, OverflowError) as exc:
                error = ProtocolError(f"add_jobs: cannot encode the arguments: {exc}")
                alone.set_exception(error)
            else:
                self.pending[request_id] = alone
        return b"".join(frames)

    def cancel(self, request_id: int) -> None:
        if self.pending.pop(request_id, None) is not None and self.alive:
            self._send(frame({"id": 0, "op": "cancel", "args": [request_id]}))

    def _send(self, data: bytes) -> None:
        self.outbox.add(data)

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():  # alive
            transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
