"""LISTEN on the schema's channel and wake the waiters of a queue.

Notifications only wake: a waiter always has a timeout and re-reads the database, so a
lost notification (or a listener connection that died) costs latency, never correctness.
Payloads are "j:<qkey>" (a job may be ready) and "e:<qkey>" (events were written).

Transitions notify a key only while some backend has announced it (the listeners table,
migration 0008): a commit that sent a NOTIFY holds a database-wide lock through its WAL
flush, so notifications nobody waits for would serialise every commit. A waiter announces
its key before it reads the database; the entry lasts ANNOUNCE_TTL_MS and is renewed when
half of that has passed, so a busy waiter announces once every 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from psyq.core.backoff import Reconnect

__all__ = ["Notifier"]

log = logging.getLogger("psyq.postgres")

Connect = Callable[[], Awaitable[asyncpg.Connection]]
Announce = Callable[[list[str], str, int], Awaitable[None]]  # keys, listener id, ttl ms

ANNOUNCE_TTL_MS = 60_000


class Notifier:
    def __init__(self, connect: Connect, channel: str, announce: Announce) -> None:
        self._connect = connect
        self._channel = channel
        self._announce = announce
        self.listener_id = uuid.uuid4().hex
        self._announced: dict[str, float] = {}  # key -> when its entry expires (monotonic)
        self._conn: asyncpg.Connection | None = None
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._reconnect: asyncio.Task[None] | None = None
        self._backoff = Reconnect()  # capped, jittered: 50 ms doubling to 2 s
        self._closed = False

    async def start(self) -> None:
        conn = await self._connect()
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        conn.add_termination_listener(self._on_lost)
        if conn.is_closed():  # lost before the listener was in place
            self._on_lost(conn)

    async def close(self) -> None:
        self._closed = True
        if self._reconnect is not None:
            self._reconnect.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnect
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            await conn.close()
        self._wake_all()

    # ------------------------------------------------------------------ waiting
    async def listen_for(self, key: str) -> None:
        """Have transitions notify `key`: announce it unless this backend's entry lasts at
        least half a TTL more. Call it before reading what the wait is for."""
        now = time.monotonic()
        if self._announced.get(key, 0.0) - now > ANNOUNCE_TTL_MS / 2000:
            return
        await self._announce([key], self.listener_id, ANNOUNCE_TTL_MS)
        self._announced[key] = now + ANNOUNCE_TTL_MS / 1000

    def register(self, key: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(future)
        return future

    def discard(self, key: str, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[key]

    @staticmethod
    async def wait(future: asyncio.Future[None], timeout_ms: int) -> None:
        """Until `future` is woken or `timeout_ms` passes (no polling)."""
        await asyncio.wait({future}, timeout=max(timeout_ms, 0) / 1000)

    # ------------------------------------------------------------------ callbacks
    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        for future in self._waiters.pop(payload, ()):
            if not future.done():
                future.set_result(None)

    def _on_lost(self, conn: Any) -> None:
        self._conn = None
        self._wake_all()  # waiters re-read the database instead of waiting for nothing
        if not self._closed and (self._reconnect is None or self._reconnect.done()):
            self._reconnect = asyncio.ensure_future(self._reconnect_loop())

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for futures in waiters.values():
            for future in futures:
                if not future.done():
                    future.set_result(None)

    async def _reconnect_loop(self) -> None:
        """LISTEN again on a new connection, with capped jittered backoff between tries;
        waiters are woken once it listens (they may have missed notifications)."""
        while not self._closed and self._conn is None:
            await self._backoff.wait()
            try:
                await self.start()
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("psyq: LISTEN connection lost, retrying: %r", exc)
                self._backoff.failed()
                continue
            self._backoff.succeeded()
            self._wake_all()

    @property
    def listening(self) -> bool:
        """Whether a connection is listening now."""
        return self._conn is not None and not self._conn.is_closed()
