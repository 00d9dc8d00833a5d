"""Pool connections go back without asyncpg's reset query (one round trip less per call),
but a connection released inside a transaction is still rolled back before reuse (asyncpg
does that before it calls the pool's reset)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import asyncpg

from psyq.backends.base import NewJob
from psyq.backends.postgres import PostgresBackend
from tests.polling import eventually

from .conftest import url_for


async def test_a_transaction_left_open_is_rolled_back_on_release(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = PostgresBackend(url_for(pg_server, fresh_schema(), pool_min="1", pool_max="1"))
    await backend.open()
    try:
        async with backend.pool.acquire() as conn:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TEMP TABLE left_open (x int)")
        async with backend.pool.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT to_regclass('pg_temp.left_open')") is None
    finally:
        await backend.close()


async def test_a_cancelled_transaction_never_goes_back_open(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """Adds cancelled at every point of their transaction (during BEGIN, a statement or
    COMMIT): no connection returns to the pool inside a transaction (asyncpg would warn
    through the loop's exception handler), and the backend keeps working."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))
    backend = PostgresBackend(url_for(pg_server, fresh_schema(), pool_min="1", pool_max="2"))
    await backend.open()
    try:
        for turns in range(40):
            job = NewJob("x", "{}", {"jobId": f"j{turns}"})
            call = asyncio.ensure_future(backend.add_jobs("q", [job]))
            for _ in range(turns):
                await asyncio.sleep(0)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
        added = await backend.add_jobs("q", [NewJob("x", "{}", {"jobId": "after"})])
        assert [record.id for record in added] == ["after"]
    finally:
        await backend.close()
        loop.set_exception_handler(None)
    assert [m for m in reported if "active transaction" in m] == []


async def test_a_call_cancelled_while_the_held_connection_opens_leaves_none_open(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    """A worker closing cancels its fetcher's call, which may be opening the backend's held
    connection (held.py) at that moment: at every point of the opening (connect, the type
    lookup after it), the connection is closed, none is left for the garbage collector
    (CI's uvloop run saw two, 2026-11-28)."""
    name = f"psyq_held_{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(url_for(pg_server, fresh_schema(), application_name=name))
    await backend.open()
    try:
        for turns in range(0, 120, 3):
            call = asyncio.ensure_future(backend.get_job("q", "none"))
            for _ in range(turns):
                await asyncio.sleep(0)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
    finally:
        await backend.close()
    count = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"

    async def none_left() -> bool:
        return bool(await admin.fetchval(count, name) == 0)

    await eventually(none_left, f"no session of {name} left", 5)
