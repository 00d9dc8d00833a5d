"""LISTEN on the layout's two channels and wake the waiters of a queue.

Every BullMQ client sends `NOTIFY bullmq_jobs, '<queue>'` when a job becomes ready and
`NOTIFY bullmq_events, '<queue>'` when events were written (coalesced under load). The
channels are database-wide, so queues of other schemas wake waiters too: harmless, a
waiter re-reads its own schema. A wait always has a timeout, so a lost notification (or a
listening connection that died) costs latency, never correctness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from psyq.backends.postgres.retry import SESSION_LOST
from psyq.rules.reconnect import Reconnect

__all__ = ["EVENTS_CHANNEL", "JOBS_CHANNEL", "Listener"]

JOBS_CHANNEL = "bullmq_jobs"
EVENTS_CHANNEL = "bullmq_events"
log = logging.getLogger("psyq.postgres")


class Listener:
    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> None:
        self._connect = connect
        self._conn: asyncpg.Connection | None = None
        self._waiters: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
        self._reconnect: asyncio.Task[None] | None = None
        self._backoff = Reconnect()
        self._closed = False

    async def start(self) -> None:
        conn = await self._connect()
        try:
            for channel in (JOBS_CHANNEL, EVENTS_CHANNEL):
                await conn.add_listener(channel, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        conn.add_termination_listener(self._on_lost)
        if conn.is_closed():
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

    def register(self, channel: str, queue: str) -> asyncio.Future[None]:
        """A future woken by the next notification of `queue` on `channel`; register it
        before reading what the wait is for, so nothing sent in between is missed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault((channel, queue), set()).add(future)
        return future

    def discard(self, channel: str, queue: str, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get((channel, queue))
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[(channel, queue)]

    @staticmethod
    async def wait(future: asyncio.Future[None], timeout_ms: int) -> None:
        await asyncio.wait({future}, timeout=max(timeout_ms, 0) / 1000)

    @staticmethod
    async def wait_any(futures: list[asyncio.Future[None]], timeout_ms: int) -> None:
        await asyncio.wait(
            futures, timeout=max(timeout_ms, 0) / 1000, return_when="FIRST_COMPLETED"
        )

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        for future in self._waiters.pop((channel, payload), ()):
            if not future.done():
                future.set_result(None)

    def _on_lost(self, conn: Any) -> None:
        self._conn = None
        self._wake_all()
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
            await self._backoff.wait()
            try:
                await self.start()
            except SESSION_LOST as exc:
                log.warning("psyq: LISTEN connection lost, retrying: %r", exc)
                self._backoff.failed()
                continue
            self._backoff.succeeded()
            self._wake_all()
