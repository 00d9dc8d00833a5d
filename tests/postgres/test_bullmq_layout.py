"""postgresql:// stores queues in BullMQ 6's layout: the schema is BullMQ's (its migrations
and ledger, schema `bullmq` unless `?schema=` says otherwise), and psyq refuses a ledger
newer than BullMQ 6."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import pytest

import psyq
from psyq.backends.postgres import open_postgres_backend
from psyq.backends.postgres import schema as layout_schema
from psyq.backends.postgres.backend import PostgresBackend
from psyq.backends.postgres.config import parse_postgres_url
from psyq.backends.postgres.schema import SchemaError
from tests.postgres.conftest import url_for


def test_the_layout_is_bullmqs_with_its_default_schema() -> None:
    assert parse_postgres_url("postgresql://db/x").schema == "bullmq"
    assert parse_postgres_url("postgresql://db/x?schema=team").schema == "team"
    assert parse_postgres_url("postgresql://db/x?layout=bullmq").schema == "bullmq"
    with pytest.raises(psyq.errors.InvalidURLError, match="layout 'psyq' is not known"):
        parse_postgres_url("postgresql://db/x?layout=psyq")
    assert isinstance(open_postgres_backend("postgresql://db/x"), PostgresBackend)


async def _ledger(admin: asyncpg.Connection, schema: str) -> list[tuple[int, str, int]]:
    rows = await admin.fetch(
        "SELECT version, name, min_client_version FROM "
        + await admin.fetchval("SELECT format('%I.migration', $1::text)", schema)
        + " ORDER BY version"
    )
    return [(row[0], row[1], row[2]) for row in rows]


async def test_psyq_creates_the_schema_from_bullmqs_migrations(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    url = url_for(pg_server, schema)
    bundled = layout_schema.bundled_migrations()
    assert bundled is not None and [v for v, _, _ in bundled][:4] == [1, 2, 3, 4]
    # concurrent openers: one migrates, the others find it done
    backends = [PostgresBackend(url) for _ in range(3)]
    await asyncio.gather(*(backend.open() for backend in backends))
    await asyncio.gather(*(backend.close() for backend in backends))
    ledger = await _ledger(admin, schema)
    assert ledger == [(v, name, 6) for v, name, _ in bundled]
    backend = PostgresBackend(url)
    await backend.open()  # migrating again is a no-op
    await backend.close()
    assert await _ledger(admin, schema) == ledger
    tables = await admin.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
    )
    names = {row[0] for row in tables}
    assert {"job", "job_log", "job_dependency", "event", "meta", "dedup", "scheduler"} <= names
    assert {"rate_limit", "metrics", "migration"} <= names


async def test_a_ledger_for_a_newer_bullmq_is_refused(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    url = url_for(pg_server, schema)
    backend = PostgresBackend(url)
    await backend.open()
    await backend.close()
    table = await admin.fetchval("SELECT format('%I.migration', $1::text)", schema)
    await admin.execute(
        f"INSERT INTO {table} (version, name, min_client_version) VALUES (99, '0099_next', 7)"
    )
    with pytest.raises(SchemaError, match=r"BullMQ 7 or newer.*ledger version 99.*BullMQ 6"):
        await PostgresBackend(url).open()


async def test_without_the_bullmq_package_a_missing_schema_is_explained(
    pg_server: str, fresh_schema: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layout_schema, "bundled_migrations", lambda: None)
    url = url_for(pg_server, fresh_schema())
    with pytest.raises(SchemaError, match=r"has no BullMQ layout.*psyq\[postgres\].*migrate: true"):
        await PostgresBackend(url).open()


async def test_migrations_newer_than_psyq_knows_are_not_applied(
    pg_server: str,
    fresh_schema: Callable[[], str],
    admin: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundled = layout_schema.bundled_migrations()
    assert bundled is not None
    future = (layout_schema.KNOWN_VERSION + 1, "9999_future", "SELECT no_such_function()")
    monkeypatch.setattr(layout_schema, "bundled_migrations", lambda: [*bundled, future])
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    await backend.close()
    applied = await _ledger(admin, schema)
    assert max(version for version, _, _ in applied) <= layout_schema.KNOWN_VERSION
