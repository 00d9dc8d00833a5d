"""The lean path for script calls: one auto-pipelined connection of psyq's own.

Every script call is packed as an EVALSHA. The first call of an event-loop turn is written
at once (Redis starts on it while the turn goes on: on a loaded host the client and Redis
work side by side); the turn's later calls leave together in one more write, at the end
of the turn (Redis reads them in one read, a fraction of one read per call). Writing
every call at the turn's end instead held the first back behind the whole turn's work and
cost a c10 worker on one server about 40% of its jobs/s (bench/log/2026-12-02-wire-first-
call.md). Each reply is read by hiredis in the
protocol's `data_received` callback, which resolves the caller's future as it arrives: no
task, no pool, no redis-py command machinery per call. Calls from any number of tasks
share the connection; Redis answers in order, so replies match a FIFO of futures (ioredis'
model). A caller that is cancelled only stops waiting: its command was sent and runs whole,
and its reply is dropped.

Besides scripts, a MULTI/EXEC of packed commands (`transaction`) runs as one write and one
future: the MULTI's OK and each QUEUED reply are dropped as they arrive.

Used for TCP `redis://host:port/db` and `rediss://` URLs (with user and password, and
redis-py's `ssl_*` options), and per primary on `redis+cluster://` and `rediss+cluster://`
(`cluster_wire.ClusterWire`); unix sockets and other redis-py options go through
`scripts.ScriptPipeline`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from itertools import repeat
from typing import Any, cast

import hiredis
from redis.asyncio.connection import SSLConnection, parse_url
from redis.exceptions import (
    BusyLoadingError,
    InvalidResponse,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from psyq.backends.redis.scripts import Script, pack_command, pack_script_call

__all__ = ["ASKING", "EXEC", "MULTI", "WireScripts", "check_reply", "wire_address"]

# What a URL may hold for the lean path (max_connections sizes redis-py's pools only), and
# on `rediss://` redis-py's TLS options, read into an SSL context the way redis-py reads them.
_PLAIN_OPTIONS = frozenset({"host", "port", "db", "username", "password", "max_connections"})
_TLS_OPTIONS = frozenset(
    name for name in inspect.signature(SSLConnection.__init__).parameters if name.startswith("ssl_")
)


def wire_address(url: str) -> dict[str, Any] | None:
    """host, port, db, username, password and TLS context (None: plain TCP) of a TCP
    `redis://` or `rediss://` URL; None when the URL needs more than that (a unix socket,
    socket options), which redis-py handles."""
    options = parse_url(url)
    kind = options.pop("connection_class", None)
    tls: dict[str, Any] = {k: v for k, v in options.items() if k in _TLS_OPTIONS}
    if kind not in (None, SSLConnection) or not _PLAIN_OPTIONS.issuperset(options.keys() - tls):
        return None
    if tls and kind is None:
        return None  # TLS options on a plain redis:// URL: redis-py says what it makes of them
    return {
        "host": options.get("host", "localhost"),
        "port": int(options.get("port", 6379)),
        "db": int(options.get("db", 0)),
        "username": options.get("username"),
        "password": options.get("password"),
        "ssl": None if kind is None else SSLConnection(**tls).ssl_context.get(),
    }


MULTI, EXEC, ASKING = pack_command("MULTI"), pack_command("EXEC"), pack_command("ASKING")
# What the pending queue holds per reply to come: its caller's future; None (a reply nobody
# reads); or a list that collects the replies it stands for (a transaction's QUEUED replies,
# whose errors say where a cluster's slot went).
Pending = asyncio.Future[Any] | list[Any] | None


def _reply_error(message: str) -> RedisError:
    """An error reply as redis-py names it (the ones psyq acts on)."""
    code = message.split(" ", 1)[0]
    if code == "NOSCRIPT":
        return NoScriptError(message)
    if code == "LOADING":  # a restarted server loading its data: a connection error
        return BusyLoadingError(message)
    return ResponseError(message)


class _Wire(asyncio.Protocol):
    """One connection: writes a turn's first command at once and the rest in one write at
    the turn's end, resolves one
    future per reply, in order. Error replies resolve to exception objects (the caller
    decides); a lost connection fails every pending future with redis-py's ConnectionError.
    `writes` counts the socket writes."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader(
            encoding="utf-8", replyError=_reply_error, protocolError=InvalidResponse
        )
        self._pending: deque[Pending] = deque()  # one entry per reply to come
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._out: list[bytes] = []  # this turn's commands after its first, written at its end
        self._turn_open = False  # a call of this turn was written: the next ones wait for _write
        self.writes = 0

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: uvloop's has the methods of asyncio.Transport, not the class
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        reply = self._reader.gets()
        while reply is not False:
            future = self._pending.popleft()
            if future is not None:
                if future.__class__ is list:
                    future.append(reply)
                elif not future.done():  # type: ignore[union-attr] # a cancelled caller left
                    future.set_result(reply)  # type: ignore[union-attr]
            reply = self._reader.gets()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        reason = f"connection to Redis lost: {exc or 'closed by the server'}"
        self._out.clear()
        while self._pending:
            future = self._pending.popleft()
            if isinstance(future, asyncio.Future) and not future.done():
                future.set_exception(RedisConnectionError(reason))

    def send(
        self, packed: bytes, skipped: int = 0, kept: list[Any] | None = None
    ) -> asyncio.Future[Any]:
        """Queue `packed` for this turn's write; the future resolves to the reply after the
        first `skipped` replies it draws (e.g. a transaction's OK and QUEUED replies),
        which are dropped, or appended to `kept` when given."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RedisConnectionError("connection to Redis lost")
        future = self._loop.create_future()
        if self._turn_open:
            self._out.append(packed)  # leaves with the rest of this turn's, in one write
        else:
            transport.write(packed)  # the turn's first call leaves at once: Redis starts on it
            self.writes += 1
            self._turn_open = True
            self._loop.call_soon(self._write)
        if skipped:
            self._pending.extend(repeat(kept, skipped))
        self._pending.append(future)
        return future

    def _write(self) -> None:
        """The turn's end: write the commands queued after its first, in one write."""
        self._turn_open = False
        out = self._out
        if not out or self._transport is None:
            return  # none, or lost meanwhile: connection_lost failed their futures
        self._out = []
        self._transport.write(out[0] if len(out) == 1 else b"".join(out))
        self.writes += 1

    async def wait_idle(self) -> None:
        waiting = [f for f in self._pending if isinstance(f, asyncio.Future)]
        await asyncio.gather(*waiting, return_exceptions=True)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class WireScripts:
    """Script calls over one `_Wire`, opened on first use and again after a loss."""

    def __init__(self, address: dict[str, Any]) -> None:
        self._address = address
        self._wire: _Wire | None = None
        self._connecting: asyncio.Lock | None = None

    async def call(self, script: Script, queue_key: str, args: tuple[Any, ...]) -> Any:
        """Run `script` for the queue at `queue_key`; load it once if the server lacks it."""
        wire = self._wire
        if wire is None or not wire.open:
            wire = await self._connect()
        packed = pack_script_call(script, queue_key, args)
        reply = await wire.send(packed)
        if isinstance(reply, NoScriptError):  # a restart or SCRIPT FLUSH: load, run again
            return check_reply(await self.run(script, packed))
        return check_reply(reply)

    async def run(self, script: Script, packed: bytes, skipped: int = 0) -> Any:
        """The reply (an error reply as an exception object, not raised) to `packed`, a call
        of `script` after `skipped` other commands; the script is loaded first if the server
        lacks it."""
        reply = await self.send(packed, skipped)
        if isinstance(reply, NoScriptError):  # a restart or SCRIPT FLUSH: load, run again
            check_reply(await self.send(pack_command("SCRIPT", "LOAD", script.source)))
            reply = await self.send(packed, skipped)
        return reply

    async def send(self, packed: bytes, skipped: int = 0, kept: list[Any] | None = None) -> Any:
        """The reply to `packed` after `skipped` others (see `_Wire.send`), not checked."""
        wire = self._wire
        if wire is None or not wire.open:
            wire = await self._connect()
        return await wire.send(packed, skipped, kept)

    async def transaction(self, framed: bytes, count: int, queue_key: str = "") -> Any:
        """Run `framed` (MULTI, `count` packed commands, EXEC); returns EXEC's reply.
        (`queue_key` routes it on a cluster: see ClusterWire.)"""
        return check_reply(await self.send(framed, skipped=count + 1))

    @property
    def connected(self) -> _Wire | None:
        """The open connection, if any (a router's hot path writes to it directly)."""
        wire = self._wire
        return wire if wire is not None and wire.open else None

    @property
    def writes(self) -> int:
        """Socket writes of the current connection (see `_Wire`)."""
        return 0 if self._wire is None else self._wire.writes

    async def _connect(self) -> _Wire:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:  # callers arriving together share one connect
            if self._wire is None or not self._wire.open:
                self._wire = await self._open_wire()
            return self._wire

    async def _open_wire(self) -> _Wire:
        address = self._address
        loop = asyncio.get_running_loop()
        tls = address.get("ssl")
        _, wire = await loop.create_connection(_Wire, address["host"], address["port"], ssl=tls)
        try:
            if address["password"] is not None:
                user = [address["username"]] if address["username"] else []
                check_reply(await wire.send(pack_command("AUTH", *user, address["password"])))
            if address["db"]:
                check_reply(await wire.send(pack_command("SELECT", address["db"])))
        except BaseException:
            wire.close()
            raise
        return wire

    async def wait_idle(self) -> None:
        if self._wire is not None:
            await self._wire.wait_idle()

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None


def check_reply(reply: Any) -> Any:
    """`reply`, raised when it is an error reply."""
    if isinstance(reply, Exception):
        raise reply
    return reply
