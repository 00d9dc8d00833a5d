"""`psyq://host:6789`: the BackendAdapter of a `psyq server`, over its wire protocol.

    psyq://host:6789                 plain TCP (6789 when the port is left out)
    psyqs://host:6789                TLS (the system's CAs unless ?ca=)
    psyq://:SECRET@host:6789         the server's auth token (as redis://:password@host)
    ?token=SECRET                    the same, as a parameter
    ?ca=/path/ca.pem                 CA file that signs the server's certificate (psyqs://)
    ?pool=2                          connections per backend object (requests are pipelined
                                     on each: one is enough for most processes)
    ?connect_timeout=10              seconds a call keeps reconnecting before it raises

Every adapter method is one request (settle_many and multi-slot fetches included: one round
trip each), forwarded by generated.py, which is written from the contract. A connection that
drops fails its pending calls with `psyq.ConnectionError`; the next call reconnects with
capped, jittered exponential backoff. Errors raised on the server come back as the same psyq
exception type with the same message. wait_for_job and read_events block on the server,
which answers when the engine wakes them (no polling).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, cast

from psyq.backends.base import ExportPage, JobRecord, NewJob
from psyq.backends.server.connection import ClientConnection
from psyq.backends.server.generated import Forwarders
from psyq.backends.server.protocol import BLOCKING_COMMANDS, PROTOCOL_VERSION, ProtocolError
from psyq.backends.server.settings import PsyqSettings
from psyq.errors import ClosedError, ConnectionError
from psyq.rules.reconnect import Reconnect

__all__ = ["ServerBackend", "open_server_backend"]

CLOSE_TIMEOUT_S = 2.0  # how long close() waits for its connections' closing handshakes


class ServerBackend(Forwarders):
    """The adapter of a remote `psyq server`; see the module docstring for the URL."""

    kind = "psyq"
    event_ids_count = True
    batch_settles = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.settings = PsyqSettings(url)
        self._conns: list[ClientConnection | None] = [None] * self.settings.pool
        self._locks = [asyncio.Lock() for _ in self._conns]
        self._turn = 0
        self._backoff = Reconnect()  # capped, jittered; shared by the pool's slots
        self._closed = False
        self._version = PROTOCOL_VERSION  # lower once a server refused it (an older server)
        self._adding: ClientConnection | None = None  # the connection adds use while it lives
        # a connection ended without the server's bye since the last wait_committed
        self._ended_unsaid = False

    # ------------------------------------------------------------------ connections
    async def open(self) -> None:
        await self._connection()

    async def close(self) -> None:
        """Close the connections and wait until they are closed (TLS takes a round trip:
        each side's close_notify), aborting any still open after CLOSE_TIMEOUT_S."""
        self._closed = True
        conns, self._conns = self._conns, [None] * len(self._conns)
        closing = [conn for conn in conns if conn is not None]
        for conn in closing:
            conn.close()
        if closing:
            await asyncio.wait([conn.lost for conn in closing], timeout=CLOSE_TIMEOUT_S)
        for conn in closing:
            if conn.transport is not None:  # a peer that did not answer the close in time
                conn.transport.abort()

    async def _connection(self) -> ClientConnection:
        if self._closed:
            raise ClosedError(f"the psyq backend for {self.settings.safe_url} is closed")
        self._turn = slot = (self._turn + 1) % len(self._conns)
        conn = self._conns[slot]
        if conn is not None and conn.alive:
            return conn
        async with self._locks[slot]:
            conn = self._conns[slot]
            if conn is None or not conn.alive:
                conn = await self._reconnect()
                self._conns[slot] = conn
        return conn

    async def _reconnect(self) -> ClientConnection:
        """Connect, retrying with capped jittered backoff until connect_timeout passes."""
        deadline = time.monotonic() + self.settings.connect_timeout
        while True:
            try:
                conn = await self._connect_once(deadline)
            except (OSError, TimeoutError, ConnectionError) as exc:
                reason = str(exc) or type(exc).__name__
            else:
                self._backoff.succeeded()
                return conn
            self._backoff.failed()
            if self._closed or time.monotonic() + self._backoff.delay() > deadline:
                raise ConnectionError(self.settings.safe_url, reason)
            await self._backoff.wait()

    async def _connect_once(self, deadline: float) -> ClientConnection:
        while True:
            try:
                return await self._connect_speaking(self._version, deadline)
            except ProtocolError as exc:
                if self._version == 1 or "protocol version" not in str(exc):
                    raise
            self._version -= 1  # an older server: the next older version, from now on

    async def _connect_speaking(self, version: int, deadline: float) -> ClientConnection:
        s = self.settings
        timeout = max(0.1, deadline - time.monotonic())
        conn = await asyncio.wait_for(self._open_connection(), timeout)
        try:
            _, answer = conn.request("hello", [version, s.token])
            self._check_hello(await asyncio.wait_for(answer, timeout))
        except BaseException:
            conn.close()
            raise
        conn.version = version
        conn.on_leave = self._left
        conn.lost.add_done_callback(lambda _: self._ended(conn))
        if conn.leaving:  # its bye came with the hello answer: the server goes away
            self._left(conn)
            raise ConnectionError(s.safe_url, "the server is going away (it said bye)")
        return conn

    def _ended(self, conn: ClientConnection) -> None:
        """`conn` ended. Unless its server said bye first (it then answered what it was
        sent and commits before it goes) or this backend closed, the server (a file's
        owner) may have died with changes it answered and had not committed."""
        if not conn.leaving and not self._closed:
            self._ended_unsaid = True

    def _left(self, conn: ClientConnection) -> None:
        """`conn`'s server goes away (it said bye): adds take another connection."""
        if self._adding is conn:
            self._adding = None

    async def _open_connection(self) -> ClientConnection:
        """A new connection to the server (TCP, or TLS for psyqs://)."""
        s = self.settings
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            lambda: ClientConnection(s.safe_url), s.host, s.port, ssl=s.ssl_context()
        )
        return conn

    def _check_hello(self, answer: Any) -> None:
        """Raise when the server's hello answer says it is not the one wanted."""

    async def _call(self, op: str, *args: Any) -> Any:
        """One request on a connection of the pool; a blocking one cancelled here is
        cancelled on the server too."""
        conn = await self._connection()
        request_id, future = conn.request(op, list(args))
        try:
            return await future
        except asyncio.CancelledError:
            if op in BLOCKING_COMMANDS:
                conn.cancel(request_id)
            else:
                conn.pending.pop(request_id, None)
            raise

    # ------------------------------------------------------------------ the contract
    # `Forwarders` (generated.py, written from the contract) sends every command as one
    # request; the methods below are those where the client does more.
    async def check_ready(self) -> None:
        """The server's store can take changes (protocol 5; an older server: it answers)."""
        await self._call("now_ms")  # connected: the server's version is known
        if self._version >= 5:
            await self._call("check_ready")

    async def wait_committed(self) -> None:
        """The server commits what it answered; ConnectionError when a connection ended
        without its bye since the last call: changes answered before may be lost with a
        server that died, and the one answering now (restarted, or the peer that took a
        file over) cannot commit them."""
        await self._call("wait_committed")
        if self._ended_unsaid:
            self._ended_unsaid = False
            raise ConnectionError(
                self.settings.safe_url,
                "a connection to it ended without a bye since the changes it answered: "
                "whether they were committed is unknown",
            )

    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        """Joined with the other adds of this event-loop turn into one request (protocol 2;
        server/adding.py): each caller still gets its own records or its own error. Adds keep
        to one connection while it lives, the one their answers arrive on, so the next add
        leaves in the turn that reads the answer (see Outbox.flush_after_wakeups)."""
        conn = self._adding
        if conn is None or conn.transport is None or conn.transport.is_closing():  # not alive
            conn = self._adding = await self._connection()
            if not conn.alive:  # the connection the pool handed out closed meanwhile
                raise ConnectionError(conn.url, conn._reason)
        if conn.version < 2:
            return cast("list[JobRecord]", await self._call("add_jobs", queue, list(jobs)))
        return await conn.add_jobs(queue, jobs if type(jobs) is list else list(jobs))

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        try:
            await self._call("wait_for_job", queue, timeout_ms)
        except ConnectionError:
            return  # may return early: the caller's next fetch reconnects (or raises)

    async def reprocess_job(
        self, queue: str, job_id: str, state: str, made: bool = False, started: bool = False
    ) -> None:
        if made or started:
            await self._call("reprocess_job", queue, job_id, state, made, started)
        else:  # as a server that predates the flags takes it
            await self._call("reprocess_job", queue, job_id, state)

    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        rows = await self._call("read_events", queue, last_id, count, block_ms)
        return [(row[0], row[1], row[2]) for row in rows]

    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        page = cast(ExportPage, await self._call("export_jobs", queue, cursor, limit))
        page.key_prefix = self.key_prefix  # the form is not on the wire: the server's
        return page

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        page = self.own_keys(page)  # the server takes the page in its own form
        return cast(int, await self._call("import_jobs", queue, page, overwrite))


def open_server_backend(url: str) -> ServerBackend:
    """Entry point of the `psyq` and `psyqs` schemes."""
    return ServerBackend(url)
