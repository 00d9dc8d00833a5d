"""Fixtures of the Postgres-specific tests: a server (found as the conformance suite finds
it) and fresh schemas, each dropped after its test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import asyncpg
import pytest

from psyq.backends.postgres import PostgresBackend
from tests.conformance.conftest import service_url
from tests.postgres.server import postgres_binaries, start_postgres, with_schema


@pytest.fixture(scope="session")
def pg_server() -> str:
    hint = "apt install postgresql, or set PSYQ_TEST_POSTGRES_URL"
    return service_url(
        "postgres", "PSYQ_TEST_POSTGRES_URL", postgres_binaries(), start_postgres, hint
    )


@pytest.fixture
async def admin(pg_server: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain connection (no search_path) for looking at the catalog."""
    conn = await asyncpg.connect(pg_server)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def fresh_schema(pg_server: str) -> AsyncIterator[Callable[[], str]]:
    """`fresh_schema()` -> the name of a schema nobody uses; all are dropped afterwards."""
    made: list[str] = []

    def make() -> str:
        made.append(f"psyq_t_{uuid.uuid4().hex[:12]}")
        return made[-1]

    try:
        yield make
    finally:
        conn = await asyncpg.connect(pg_server)
        try:
            for schema in made:
                drop = "SELECT format('DROP SCHEMA IF EXISTS %I CASCADE', $1::text)"
                await conn.execute(await conn.fetchval(drop, schema))
        finally:
            await conn.close()


@asynccontextmanager
async def opened_backend(server: str, schema: str) -> AsyncIterator[PostgresBackend]:
    """A PostgresBackend on `schema` of `server`, open for the block."""
    backend = PostgresBackend(url_for(server, schema))
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


def url_for(server: str, schema: str, **params: str) -> str:
    url = with_schema(server, schema)
    return url + "".join(f"&{key}={value}" for key, value in params.items())


def conninfo_for(server: str) -> str:
    """The libpq conninfo string (`host=... port=... dbname=... user=...`) of a server URL,
    as `bullmq`'s Postgres options take it."""
    parts = urlsplit(server)
    conninfo = f"host={parts.hostname} port={parts.port or 5432} dbname={parts.path[1:]}"
    return conninfo + (f" user={parts.username}" if parts.username else "")
