"""Pool connections go back without asyncpg's reset query (one round trip less per call),
but a connection released inside a transaction is still rolled back before reuse (asyncpg
does that before it calls the pool's reset)."""

from __future__ import annotations

from collections.abc import Callable

from psyq.backends.postgres import PostgresBackend

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
