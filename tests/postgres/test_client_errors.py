"""Which failures of a call the backend runs again: a lost connection is retried (after
the shared reconnect backoff); a fault of the call itself, which asyncpg also reports as
InterfaceError (a wrong number of query arguments, say), is raised
at once with a message naming it, not retried as a lost connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from psyq.backends.postgres import PostgresBackend
from psyq.errors import ConnectionError, PsyqError

from .conftest import url_for


@pytest.fixture
async def backend(
    pg_server: str, fresh_schema: Callable[[], str]
) -> AsyncIterator[PostgresBackend]:
    opened = PostgresBackend(url_for(pg_server, fresh_schema(), pool_min="1", pool_max="2"))
    await opened.open()
    yield opened
    await opened.close()


async def test_a_fault_of_the_call_is_raised_at_once(backend: PostgresBackend) -> None:
    calls = 0

    async def run(conn: asyncpg.Connection) -> object:
        nonlocal calls
        calls += 1
        return await conn.fetch("SELECT $1::int + $2::int", 1)  # one argument short

    with pytest.raises(PsyqError) as raised:
        await backend._on_connection(run)
    assert calls == 1  # not retried
    assert not isinstance(raised.value, ConnectionError)
    assert "not retried" in str(raised.value)
    assert isinstance(raised.value.__cause__, asyncpg.InterfaceError)
    assert await backend.now_ms() > 0  # the backend still works


async def test_a_connection_closed_under_a_call_is_retried(backend: PostgresBackend) -> None:
    """asyncpg's InterfaceError "connection is closed" is a lost connection: run again."""
    calls = 0

    async def run(conn: asyncpg.Connection) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            conn.terminate()
        return await conn.fetchval("SELECT 1")

    assert await backend._on_connection(run) == 1
    assert calls == 2


async def test_a_killed_session_is_retried(backend: PostgresBackend) -> None:
    calls = 0

    async def run(conn: asyncpg.Connection) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            await conn.fetchval("SELECT pg_terminate_backend(pg_backend_pid())")
        return await conn.fetchval("SELECT 2")

    assert await backend._on_connection(run) == 2
    assert calls == 2


async def test_a_closed_backend_says_so(backend: PostgresBackend) -> None:
    pool = backend.pool
    await pool.close()
    with pytest.raises(PsyqError, match="pool is closed") as raised:
        await backend._on_connection(lambda conn: conn.fetchval("SELECT 1"))
    assert not isinstance(raised.value, ConnectionError)
