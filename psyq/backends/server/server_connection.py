"""One client connection of `psyq server`, and the limits each connection keeps.

A `ServerConnection` (an asyncio protocol) splits the byte stream into frames, checks the
hello, then runs every request as its own task, so many are in flight at once and answers
leave in the order they finish. Answers written in one event-loop turn go out in one write.
A blocked request (wait_for_job, read_events) waits on the engine's future, so its answer is
pushed the moment work or an event arrives.

Limits, per connection: frames over `max_frame` bytes close it (over MAX_HELLO_FRAME before
its hello is accepted); a frame left half-sent for `frame_timeout` seconds closes it; so does
no accepted hello within `hello_timeout` seconds, and, when `idle_timeout` is set, that many
seconds without a byte received while no request runs. Past `max_in_flight` running
requests, or once `max_unsent` bytes of answers wait to be written (a client that does not
read), the server stops reading from it until answers drain. Across connections, a
connection whose unsent answers would take the waiting total past `max_unsent_total` is
closed. A closed connection drops its buffers at once. Bad requests (unknown command, wrong
arguments, a value that is not valid MessagePack) are answered with an error naming the
value when the request id can be read, else the connection is closed. Other connections
never notice.

Going away cleanly (`leave`, from `Server.drain`): a version 4 client is told `bye` and the
connection runs what it sends until its EOF; an older one is read no more. Either way the
requests read are answered (a blocked one at once, with its timeout's answer), then
`drained` resolves; the server closes the connection after (`Server.close`).

The connection sees its `Server` (server.py) through `ServerView`, the few members it uses.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, cast

from psyq.backends.base import BackendAdapter, JobRecord, NewJob
from psyq.backends.server.adding import compact, compact_one, parse_groups, parse_one
from psyq.backends.server.codec import decode, frame
from psyq.backends.server.commands import Signature, check_args
from psyq.backends.server.eager import drive
from psyq.backends.server.framing import FrameBuffer
from psyq.backends.server.outbox import Outbox
from psyq.backends.server.protocol import (
    ADD_WITH_OPTIONS,
    BLOCKING_COMMANDS,
    BYE,
    EARLY_ANSWERS,
    MAX_FRAME_BYTES,
    MAX_HELLO_FRAME,
    SUPPORTED_VERSIONS,
    ProtocolError,
)
from psyq.errors import PsyqError

__all__ = ["ServerConnection", "ServerLimits", "ServerView"]

log = logging.getLogger("psyq.server")


@dataclass(frozen=True)
class ServerLimits:
    max_frame: int = MAX_FRAME_BYTES
    max_in_flight: int = 1024
    frame_timeout: float = 30.0
    hello_timeout: float = 10.0  # seconds from connect to an accepted hello
    idle_timeout: float = 0.0  # seconds without a byte or a running request; 0: never
    max_unsent: int = 1024 * 1024  # bytes of answers waiting per connection before pausing
    max_unsent_total: int = 256 * 1024 * 1024  # the same, summed over paused connections


class ServerView(Protocol):
    """A connection's view of its server (`Server`): the backend and the commands it
    serves, the limits, the open connections and their unsent answers, the hello's checks."""

    backend: BackendAdapter
    limits: ServerLimits
    signatures: dict[str, Signature]
    connections: set[ServerConnection]
    unsent: int  # bytes waiting to be written on connections paused for writing
    hello_info: dict[str, Any]
    peer_check: Callable[[socket.socket], str | None] | None
    leaving: bool  # drain() began: new connections are refused

    def check_token(self, given: Any) -> bool: ...


class ServerConnection(asyncio.BufferedProtocol):
    """One client connection: frames in (received into the frame buffer's own memory),
    requests as tasks, answers out."""

    def __init__(self, server: ServerView) -> None:
        self.server = server
        self.limits = server.limits
        self.frames = FrameBuffer(min(MAX_HELLO_FRAME, server.limits.max_frame))
        self.transport: asyncio.Transport | None = None
        self.greeted = False
        self.version = 0  # the protocol version the client's hello named
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.blocked: dict[int, str] = {}  # request id -> op, of the blocked requests
        self.leaving = False  # the server goes away: see `leave`
        self.drained: asyncio.Future[None] | None = None  # set by `leave`
        self._deaf = False  # leaving: read nothing more (the client sent its EOF, or is old)
        self._backlog: deque[bytes] = deque()  # frames read, not started (in-flight limit)
        self._reading_paused = False
        self._writing_paused = False
        self._stall_timer: asyncio.TimerHandle | None = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self._unsent = 0  # bytes counted in the server's `unsent` while writing is paused
        self._reads = 0  # reads so far; the idle sweep compares it with `_reads_seen`
        self._reads_seen = 0
        self._quiet_since = 0.0
        self._loop = asyncio.get_running_loop()
        self.peer = "?"

    # ------------------------------------------------------------------ transport events
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: uvloop's has the methods of asyncio.Transport, not the class
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=self.limits.max_unsent)
        self.outbox = Outbox(self._write)
        self.peer = str(transport.get_extra_info("peername"))
        self.server.connections.add(self)
        self._quiet_since = self._loop.time()
        self._hello_timer = self._loop.call_later(self.limits.hello_timeout, self._no_hello)
        if self.server.leaving:  # accepted as the listener closed: drain() has begun
            self.abort()
            return
        check = self.server.peer_check
        refused = check(transport.get_extra_info("socket")) if check is not None else None
        if refused is not None:
            log.warning("refusing a connection: %s", refused)
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._cancel_stall_timer()
        self._cancel_hello_timer()
        self._uncount_unsent()
        for task in self.tasks.values():
            task.cancel()
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.transport = None
        self.frames.release()  # a large frame buffer goes now, not at the next GC
        self.outbox.close()
        self._backlog.clear()

    def eof_received(self) -> bool | None:
        """The client sends nothing more. When the server is leaving, that is the client's
        answer to `bye`: the connection stays open to answer what it sent. Otherwise the
        transport closes."""
        if not self.leaving:
            return None
        self._deaf = True
        self._drain_done()
        return True

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._reads += 1
        try:
            bodies = self.frames.buffer_updated(nbytes)
        except ProtocolError as exc:
            self.fail(exc)
            return
        self._frames_arrived(bodies)

    def data_received(self, data: bytes) -> None:
        self._reads += 1
        try:
            bodies = self.frames.feed(data)
        except ProtocolError as exc:
            self.fail(exc)
            return
        self._frames_arrived(bodies)

    def _frames_arrived(self, bodies: list[bytes]) -> None:
        outbox = self.outbox
        outbox.hold()  # the answers of calls that finish at once leave together, now
        try:
            # the common case, one request that may start now (nothing waits to start,
            # reading and writing run, there is room): none of _run_backlog's bookkeeping
            if (
                len(bodies) == 1
                and not self._backlog
                and not self._reading_paused
                and not self._writing_paused
                and len(self.tasks) < self.limits.max_in_flight
            ):
                self.handle(bodies[0])
            else:
                self._backlog.extend(bodies)
                self._run_backlog()
        finally:
            outbox.release()
        if self._stall_timer is not None or self.frames.partial:
            self._watch_partial_frame(progress=bool(bodies))

    def pause_writing(self) -> None:
        """The transport holds `max_unsent` bytes of answers: start no request and read
        nothing more until they drain; count them in the server's total."""
        self._writing_paused = True
        self._update_reading()
        self._count_unsent()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._uncount_unsent()
        self._run_backlog()
        self._update_reading()

    # ------------------------------------------------------------------ requests
    def handle(self, body: bytes) -> None:
        try:
            message = decode(body)
        except ProtocolError as exc:
            self.fail(exc)
            return
        request_id = message.get("id")
        if type(request_id) is not int:
            self.fail(ProtocolError(f"a request needs an integer id, got {request_id!r:.80}"))
            return
        op = message.get("op")
        if not self.greeted:
            self.hello(request_id, op, message.get("args"))
        elif op == "cancel":
            self.cancel(message.get("args"))
        else:
            self.start_request(request_id, op, message.get("args"))

    def hello(self, request_id: int, op: Any, args: Any) -> None:
        if op != "hello" or type(args) is not list or len(args) != 2:
            self.fail(ProtocolError(f"the first request must be hello, got {op!r:.80}"), request_id)
        elif type(args[0]) is not int or args[0] not in SUPPORTED_VERSIONS:
            speaks = " and ".join(map(str, SUPPORTED_VERSIONS))
            self.fail(
                ProtocolError(
                    f"protocol version {args[0]!r:.20} is not supported; "
                    f"this server speaks {speaks}"
                ),
                request_id,
            )
        elif not self.server.check_token(args[1]):
            self.fail(PsyqError("authentication failed: wrong or missing token"), request_id)
        else:
            self.greeted = True
            self.version = args[0]
            self.frames.max_frame = self.limits.max_frame
            self._cancel_hello_timer()
            greeting = {"server": "psyq", "version": args[0]}
            self.answer(request_id, {**self.server.hello_info, **greeting})

    def cancel(self, args: Any) -> None:
        if type(args) is list and len(args) == 1 and type(args[0]) is int:
            task = self.tasks.get(args[0])
            if task is not None:
                task.cancel()

    def start_request(self, request_id: int, op: Any, args: Any) -> None:
        if request_id in self.tasks:
            self.reply_error(request_id, ProtocolError(f"request id {request_id} is in use"))
            return
        if op == "add" and self.version >= 3:
            self.start_add(request_id, args)
            return
        if op == "add_batch" and self.version >= 2:
            self.start_add_batch(request_id, args)
            return
        sig = self.server.signatures.get(op) if type(op) is str else None
        if sig is None:
            self.reply_error(request_id, ProtocolError(f"unknown command {op!r:.80}"))
            return
        try:
            check_args(sig, args)
        except ProtocolError as exc:
            self.reply_error(request_id, exc)
            return
        self.run_eagerly(request_id, sig.op, getattr(self.server.backend, sig.op)(*args))

    def run_eagerly(
        self,
        request_id: int,
        op: str,
        coro: Coroutine[Any, Any, Any],
        shape: Callable[[Any], Any] | None = None,
    ) -> None:
        """Run the call's first step now, in its own context: most engine calls finish there
        and are answered without a task. One that suspends (a blocked wait, a durable
        commit) goes on in a task, resumed when the future it waits on is done. `shape`
        makes the answer of the call's result (else the result is the answer)."""
        context = contextvars.copy_context()
        try:
            waiting = context.run(coro.send, None)
        except StopIteration as done:
            self.answer(request_id, done.value if shape is None else shape(done.value))
        except BaseException as exc:
            self.reply_failure(request_id, op, exc)
        else:
            if op in BLOCKING_COMMANDS:
                if self.leaving:  # answered at once: the server goes away
                    coro.close()
                    self.answer(request_id, EARLY_ANSWERS[op])
                    return
                self.blocked[request_id] = op
            resume = self._resume(request_id, op, coro, waiting, shape)
            self.tasks[request_id] = asyncio.Task(resume, loop=self._loop, context=context)

    async def _resume(
        self,
        request_id: int,
        op: str,
        coro: Coroutine[Any, Any, Any],
        waiting: Any,
        shape: Callable[[Any], Any] | None,
    ) -> None:
        try:
            result = await drive(coro, waiting)
            if shape is not None:
                result = shape(result)
        except BaseException as exc:
            self.reply_failure(request_id, op, exc)
        else:
            self.answer(request_id, result)
        finally:
            self.tasks.pop(request_id, None)
            self.blocked.pop(request_id, None)
            self._run_backlog()

    def start_add(self, request_id: int, args: Any) -> None:
        """One job, without options (protocol 3) or with them (6): one add_jobs call,
        answered with the job's entry (server/adding.py), or with its error as any
        request is."""
        try:
            queue, new = parse_one(args, self.version >= ADD_WITH_OPTIONS)
        except ProtocolError as exc:
            self.reply_error(request_id, exc)
            return
        coro = self.server.backend.add_jobs(queue, [new])
        self.run_eagerly(request_id, "add_jobs", coro, partial(compact_one, queue, new))

    def start_add_batch(self, request_id: int, args: Any) -> None:
        """One add_jobs call per group, each started at once in its own context as a request
        is; answered when all are done, each group with its records or its own error."""
        try:
            groups = parse_groups(args)
        except ProtocolError as exc:
            self.reply_error(request_id, exc)
            return
        results: list[Any] = [None] * len(groups)
        suspended: list[tuple[int, asyncio.Task[Any]]] = []
        for index, (queue, jobs) in enumerate(groups):
            context = contextvars.copy_context()
            coro = self.server.backend.add_jobs(queue, jobs)
            try:
                waiting = context.run(coro.send, None)
            except StopIteration as done:
                results[index] = compact(queue, jobs, done.value)
            except BaseException as exc:
                results[index] = self.group_error(exc)
            else:
                task = asyncio.Task(drive(coro, waiting), loop=self._loop, context=context)
                suspended.append((index, task))
        if not suspended:
            self.answer(request_id, results)
            return
        finish = self._finish_add_batch(request_id, groups, results, suspended)
        self.tasks[request_id] = asyncio.Task(finish, loop=self._loop)

    async def _finish_add_batch(
        self,
        request_id: int,
        groups: list[tuple[str, list[NewJob]]],
        results: list[Any],
        suspended: list[tuple[int, asyncio.Task[Any]]],
    ) -> None:
        try:
            for index, task in suspended:
                try:
                    records: list[JobRecord] = await task
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:
                    results[index] = self.group_error(exc)
                else:
                    queue, jobs = groups[index]
                    results[index] = compact(queue, jobs, records)
        except asyncio.CancelledError:
            for _, task in suspended:
                task.cancel()  # cancelled by the client or a lost connection: nobody waits
            return
        finally:
            self.tasks.pop(request_id, None)
            self._run_backlog()
        self.answer(request_id, results)

    def group_error(self, exc: BaseException) -> PsyqError:
        """What a group of add_batch answers for the exception its add_jobs raised."""
        if isinstance(exc, PsyqError):
            return exc
        if isinstance(exc, Exception):
            log.error("add_jobs from %s failed", self.peer, exc_info=exc)
            return PsyqError(f"add_jobs failed on the server: {exc!r}")
        raise exc

    def reply_failure(self, request_id: int, op: str, exc: BaseException) -> None:
        if isinstance(exc, asyncio.CancelledError):
            return  # cancelled by the client or a lost connection: nobody waits for it
        if isinstance(exc, PsyqError):
            self.reply_error(request_id, exc)
        elif isinstance(exc, Exception):
            log.error("%s from %s failed", op, self.peer, exc_info=exc)
            self.reply_error(request_id, PsyqError(f"{op} failed on the server: {exc!r}"))
        else:
            raise exc

    # ------------------------------------------------------------------ answers
    def answer(self, request_id: int, result: Any) -> None:
        try:
            data = frame({"id": request_id, "ok": result})
        except (TypeError, ValueError, OverflowError) as exc:
            error = PsyqError(f"cannot encode the answer: {exc}")
            data = frame({"id": request_id, "err": error})
        self.outbox.add(data)  # what send does, one call fewer per answer

    def reply_error(self, request_id: int, exc: PsyqError) -> None:
        self.send(frame({"id": request_id, "err": exc}))

    def send(self, data: bytes) -> None:
        self.outbox.add(data)

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():  # _open()
            transport.write(data)

    def fail(self, exc: PsyqError, request_id: int = 0) -> None:
        """Answer `exc` (to `request_id`, 0 when it is unknown) and close the connection."""
        log.info("closing %s: %s", self.peer, exc)
        self.reply_error(request_id, exc)
        self.outbox.flush()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def leave(self) -> None:
        """The server goes away: tell a version 4 client (`bye`) and take its requests until
        its EOF, else read no more; answer the blocked requests now, as on their timeout.
        `drained` resolves once every request read is answered and no more will come."""
        self.drained = self._loop.create_future()
        if self.transport is None:
            self.drained.set_result(None)
            return
        self.leaving = True
        for request_id, op in list(self.blocked.items()):
            task = self.tasks.pop(request_id, None)
            self.blocked.pop(request_id)
            if task is not None:
                task.cancel()
                self.answer(request_id, EARLY_ANSWERS[op])
        if self.greeted and self.version >= 4:
            self.send(frame(BYE))
        else:
            self._deaf = True
            self._update_reading()
        self._drain_done()

    def finish(self) -> None:
        """Close after `leave`: what is written reaches the client first; a connection that
        did not drain is aborted."""
        if self.drained is not None and self.drained.done():
            self.outbox.flush()
            if self.transport is not None:
                self.transport.close()
        else:
            self.abort()

    def _drain_done(self) -> None:
        """Resolve `drained` once the client sends no more and every request is answered."""
        if self._deaf and not self.tasks and not self._backlog and self.drained is not None:
            self.outbox.flush()
            if not self.drained.done():
                self.drained.set_result(None)

    def drop(self, why: str) -> None:
        """Close the connection for `why` (logged) without waiting for its answers to be
        written: a client that does not read would keep them forever."""
        log.info("closing %s: %s", self.peer, why)
        self.abort()

    # ------------------------------------------------------------------ limits
    def _run_backlog(self) -> None:
        """Start the frames read so far, up to max_in_flight running requests, while the
        answers waiting to be written stay under max_unsent."""
        backlog, limit = self._backlog, self.limits.max_in_flight
        while backlog and len(self.tasks) < limit and not self._writing_paused and self._open():
            self.handle(backlog.popleft())
        if backlog or self._writing_paused or self._reading_paused:  # else nothing to change
            self._update_reading()
        if self.leaving:
            self._drain_done()

    def _open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None:
            return
        busy = self._writing_paused or bool(self._backlog) or self._deaf
        if busy and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not busy and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _watch_partial_frame(self, progress: bool) -> None:
        """Time a frame that stays incomplete; any complete frame restarts the clock."""
        partial = self.frames.partial
        if (progress or not partial) and self._stall_timer is not None:
            self._cancel_stall_timer()
        if partial and self._stall_timer is None:
            self._stall_timer = self._loop.call_later(
                self.limits.frame_timeout, self._partial_frame_timed_out
            )

    def _count_unsent(self) -> None:
        """Add this connection's unsent answers to the server's total; close it when that
        passes max_unsent_total."""
        transport = self.transport
        if transport is None or self._unsent:
            return
        self._unsent = transport.get_write_buffer_size()
        self.server.unsent += self._unsent
        if self.server.unsent > self.limits.max_unsent_total:
            total = self.limits.max_unsent_total
            self.drop(f"its unread answers took those of all clients past {total} bytes")

    def _uncount_unsent(self) -> None:
        self.server.unsent -= self._unsent
        self._unsent = 0

    def _no_hello(self) -> None:
        self._hello_timer = None
        seconds = self.limits.hello_timeout
        self.fail(ProtocolError(f"no hello accepted within {seconds}s of connecting"))

    def _cancel_hello_timer(self) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None

    def close_if_idle(self, now: float, timeout: float) -> None:
        """Close the connection when nothing was received for `timeout` seconds and no
        request runs or waits (a blocked wait_for_job is not idle)."""
        if self._reads != self._reads_seen or self.tasks or self._backlog:
            self._reads_seen = self._reads
            self._quiet_since = now
        elif now - self._quiet_since >= timeout and self.greeted:
            if self._writing_paused:
                self.drop(f"idle for {timeout}s with answers it does not read")
            else:
                self.fail(ProtocolError(f"idle for {timeout}s"))

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _partial_frame_timed_out(self) -> None:
        self._stall_timer = None
        seconds = self.limits.frame_timeout
        self.fail(ProtocolError(f"a frame stayed incomplete for {seconds}s"))
