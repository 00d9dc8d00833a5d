"""The lean path for script calls: one auto-pipelined connection of psyq's own.

Every script call is written to the socket at once as a packed EVALSHA, and its reply is
read by hiredis in the protocol's `data_received` callback, which resolves the caller's
future: no task, no pool, no redis-py command machinery per call. Calls from any number
of tasks share the connection; Redis answers in order, so replies match a FIFO of futures
(ioredis' model). A caller that is cancelled only stops waiting: its command was sent and
runs whole, and its reply is dropped.

Besides scripts, a MULTI/EXEC of packed commands (`transaction`) runs as one write and one
future: the MULTI's OK and each QUEUED reply are dropped as they arrive.

Used for plain `redis://host:port/db` URLs (with user and password); TLS, unix sockets,
other redis-py options and Redis Cluster go through `scripts.ScriptPipeline`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from itertools import repeat
from typing import Any, cast

import hiredis
from redis.asyncio.connection import parse_url
from redis.exceptions import (
    BusyLoadingError,
    InvalidResponse,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from psyq.backends.redis.scripts import Script, pack_command, pack_script_call

__all__ = ["EXEC", "MULTI", "WireScripts", "wire_address"]

# What a URL may hold for the lean path (max_connections sizes redis-py's pools only).
_PLAIN_OPTIONS = frozenset({"host", "port", "db", "username", "password", "max_connections"})


def wire_address(url: str) -> dict[str, Any] | None:
    """host, port, db, username, password of a plain TCP `redis://` URL; None when the URL
    needs more than that (TLS, a unix socket, socket options), which redis-py handles."""
    options = parse_url(url)
    if not _PLAIN_OPTIONS.issuperset(options):
        return None
    return {
        "host": options.get("host", "localhost"),
        "port": int(options.get("port", 6379)),
        "db": int(options.get("db", 0)),
        "username": options.get("username"),
        "password": options.get("password"),
    }


MULTI, EXEC = pack_command("MULTI"), pack_command("EXEC")


def _reply_error(message: str) -> RedisError:
    """An error reply as redis-py names it (the ones psyq acts on)."""
    code = message.split(" ", 1)[0]
    if code == "NOSCRIPT":
        return NoScriptError(message)
    if code == "LOADING":  # a restarted server loading its data: a connection error
        return BusyLoadingError(message)
    return ResponseError(message)


class _Wire(asyncio.Protocol):
    """One connection: writes packed commands, resolves one future per reply, in order.
    Error replies resolve to exception objects (the caller decides); a lost connection
    fails every pending future with redis-py's ConnectionError."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader(
            encoding="utf-8", replyError=_reply_error, protocolError=InvalidResponse
        )
        # one entry per reply to come: its caller's future, or None (a reply nobody reads)
        self._pending: deque[asyncio.Future[Any] | None] = deque()
        self._transport: asyncio.Transport | None = None

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
            if future is not None and not future.done():  # a cancelled caller left
                future.set_result(reply)
            reply = self._reader.gets()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        reason = f"connection to Redis lost: {exc or 'closed by the server'}"
        while self._pending:
            future = self._pending.popleft()
            if future is not None and not future.done():
                future.set_exception(RedisConnectionError(reason))

    def send(self, packed: bytes, skipped: int = 0) -> asyncio.Future[Any]:
        """Write `packed`; the future resolves to the reply after the first `skipped`
        replies it draws (e.g. a transaction's OK and QUEUED replies), which are dropped."""
        if self._transport is None or self._transport.is_closing():
            raise RedisConnectionError("connection to Redis lost")
        future = asyncio.get_running_loop().create_future()
        self._transport.write(packed)
        self._pending.extend(repeat(None, skipped))
        self._pending.append(future)
        return future

    async def wait_idle(self) -> None:
        await asyncio.gather(*filter(None, self._pending), return_exceptions=True)

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
            _check(await wire.send(pack_command("SCRIPT", "LOAD", script.source)))
            reply = await wire.send(packed)
        return _check(reply)

    async def transaction(self, framed: bytes, count: int) -> Any:
        """Run `framed` (MULTI, `count` packed commands, EXEC); returns EXEC's reply."""
        wire = self._wire
        if wire is None or not wire.open:
            wire = await self._connect()
        return _check(await wire.send(framed, skipped=count + 1))

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
        _, wire = await loop.create_connection(_Wire, address["host"], address["port"])
        try:
            if address["password"] is not None:
                user = [address["username"]] if address["username"] else []
                _check(await wire.send(pack_command("AUTH", *user, address["password"])))
            if address["db"]:
                _check(await wire.send(pack_command("SELECT", address["db"])))
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


def _check(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply
