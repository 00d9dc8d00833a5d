"""LISTEN on the schema's channel and wake the waiters of a queue.

Notifications only wake: a waiter always has a timeout and re-reads the database, so a
lost notification (or a listener connection that died) costs latency, never correctness.
Payloads are "j:<qkey>" (a job may be ready) and "e:<qkey>" (events were written).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

__all__ = ["Notifier"]

log = logging.getLogger("psyq.postgres")

Connect = Callable[[], Awaitable[asyncpg.Connection]]
RECONNECT_DELAY_S = 0.5


class Notifier:
    def __init__(self, connect: Connect, channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._conn: asyncpg.Connection | None = None
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._reconnect: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        conn = await self._connect()
        await conn.add_listener(self._channel, self._on_notify)
        conn.add_termination_listener(self._on_lost)
        self._conn = conn

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
        while not self._closed and self._conn is None:
            try:
                await self.start()
                self._wake_all()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("psyq: LISTEN connection lost, retrying: %s", exc)
                await asyncio.sleep(RECONNECT_DELAY_S)
