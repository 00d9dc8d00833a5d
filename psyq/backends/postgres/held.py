"""The connection a backend holds for calls that come one after another.

A producer adding jobs one at a time, or a script reading them, makes one call after
another: each took a pool connection and gave it back, and asyncpg's pool starts a task for
each of the two (the acquire's timeout and the release's shield), which cost about as much
again as a short statement's round trip (bench log entry 2026-11-28 Today's tables). The
backend holds one connection of its own beside the pool, opened at its first call, for
one call at a time; a call that finds it busy takes a pool connection, as before, so
concurrent callers (a worker's slots) are served as they were. A call that fails in a way
that may leave the connection in doubt (cancelled, lost, a fault of the client) closes it;
the next call opens another."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import asyncpg

__all__ = ["HeldConnection"]


class HeldConnection:
    """One connection outside the pool, lent to one call at a time (see the module doc)."""

    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]]) -> None:
        self._connect = connect
        self._conn: asyncpg.Connection | None = None
        self.busy = False
        self._closed = False  # the backend closes: no connection is opened any more

    def lease(self, pool: asyncpg.Pool, timeout: float) -> Any:
        """`async with` it: this connection when free, else one of `pool`'s (a closed pool
        says so there: the backend was closed)."""
        if self.busy or self._closed or pool.is_closing():
            return pool.acquire(timeout=timeout)
        return _Lease(self)

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        if self.busy:  # a call is under way on it: the backend closes under it
            conn.terminate()
            return
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await conn.close(timeout=2)
        if not conn.is_closed():
            conn.terminate()

    async def _take(self) -> asyncpg.Connection:
        self.busy = True
        try:
            if self._conn is None or self._conn.is_closed():
                conn = await self._connect()
                if self._closed:  # the backend closed meanwhile: as its pool would say
                    conn.terminate()
                    raise asyncpg.InterfaceError("the backend is closed")
                self._conn = conn
        except BaseException:
            self.busy = False
            raise
        return self._conn

    def _give_back(self, error: BaseException | None) -> None:
        conn = self._conn
        if error is not None and conn is not None and not _still_sound(error, conn):
            self._conn = None
            conn.terminate()
        self.busy = False


class _Lease:
    def __init__(self, held: HeldConnection) -> None:
        self._held = held

    async def __aenter__(self) -> asyncpg.Connection:
        return await self._held._take()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._held._give_back(exc)


def _still_sound(error: BaseException, conn: asyncpg.Connection) -> bool:
    """Whether `conn` is fit for the next call after `error`: a statement the server refused
    (a layout code, a conflict, bad data) leaves it so, outside a transaction; anything
    else (a cancellation mid-statement, a lost connection, a fault of the client) may not."""
    return (
        isinstance(error, asyncpg.PostgresError)
        and not conn.is_closed()
        and not conn.is_in_transaction()
    )
