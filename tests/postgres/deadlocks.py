"""Counting a database's deadlocks as Postgres counts them (pg_stat_database.deadlocks),
in a database of the test's own so nobody else's are counted.

A session reports its counts to the statistics when it goes idle (at most once a second)
or when it ends; a reader sees a snapshot per transaction. So the count is read after
every session of the database has ended, on a fresh snapshot."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tests.polling import eventually

__all__ = ["database_url", "deadlocks", "own_database", "sessions_gone"]


def database_url(server: str, database: str) -> str:
    """`server`'s URL naming `database` instead of its own."""
    parts = urlsplit(server)
    return urlunsplit(parts._replace(path=f"/{database}"))


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


@contextlib.asynccontextmanager
async def own_database(server: str, prefix: str) -> AsyncIterator[str]:
    """The URL of a database made for the caller, dropped afterwards."""
    name = f"psyq_{prefix}_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield database_url(server, name)
    finally:
        with contextlib.suppress(asyncpg.PostgresError):
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def deadlocks(server: str, url: str) -> int:
    """Postgres's count of deadlocks in the database of `url`, on a fresh snapshot."""
    admin = await asyncpg.connect(server)
    try:
        await admin.execute("SELECT pg_stat_clear_snapshot()")
        count = await admin.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = $1", database_name(url)
        )
        return int(count or 0)
    finally:
        await admin.close()


async def sessions_gone(server: str, url: str, timeout: float = 20.0) -> None:
    """Until no session is connected to the database of `url` (each ended session has
    reported its counts)."""
    admin = await asyncpg.connect(server)
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"

    async def none_left() -> bool:
        return not await admin.fetchval(query, database_name(url))

    try:
        await eventually(none_left, f"no session connected to {url}", timeout)
    finally:
        await admin.close()
