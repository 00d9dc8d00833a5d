"""Migrations as the database sees them: a schema migrated step by step equals one migrated
at once; migrating twice is a no-op; concurrent migrators are serialised; a schema from a
newer psyq is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

import psyq
from psyq.backends.base import NewJob
from psyq.backends.postgres import PostgresBackend
from psyq.backends.postgres.migrate import migrate
from psyq.backends.postgres.queries import migrations

CATALOG = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, collation_name,
               replace(COALESCE(column_default, ''), $1 || '.', '') AS column_default
        FROM information_schema.columns WHERE table_schema = $1
        ORDER BY table_name, column_name""",
    "indexes": """
        SELECT tablename, indexname, replace(indexdef, $1 || '.', '') AS indexdef
        FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname""",
    "constraints": """
        SELECT c.conrelid::regclass::text AS on_table, c.conname, pg_get_constraintdef(c.oid) AS def
        FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
        WHERE n.nspname = $1 ORDER BY c.conname""",
    "sequences": """
        SELECT sequence_name, data_type, start_value, increment
        FROM information_schema.sequences WHERE sequence_schema = $1 ORDER BY sequence_name""",
    "functions": """
        SELECT p.proname, pg_get_function_arguments(p.oid) AS args, p.prosrc
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = $1 ORDER BY p.proname""",
}


async def catalog(conn: asyncpg.Connection, schema: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, query in CATALOG.items():
        rows = await conn.fetch(query, schema)
        found[name] = [
            tuple(str(value).replace(schema, "<schema>") for value in row) for row in rows
        ]
    return found


async def connect(server: str, schema: str) -> asyncpg.Connection:
    return await asyncpg.connect(server, server_settings={"search_path": schema})


async def migrated(server: str, schema: str, target: int | None = None) -> list[int]:
    conn = await connect(server, schema)
    try:
        return await migrate(conn, schema, target)
    finally:
        await conn.close()


def versions() -> list[int]:
    return [version for version, _, _ in migrations()]


async def test_there_are_migrations_in_order() -> None:
    assert versions() == list(range(1, len(versions()) + 1))
    assert len(versions()) >= 2


async def test_fresh_schema_equals_every_migration_applied_in_turn(
    pg_server: str, admin: asyncpg.Connection, fresh_schema: Callable[[], str]
) -> None:
    at_once, stepwise = fresh_schema(), fresh_schema()
    assert await migrated(pg_server, at_once) == versions()
    for version in versions():
        assert await migrated(pg_server, stepwise, target=version) == [version]
    fresh = await catalog(admin, at_once)
    stepped = await catalog(admin, stepwise)
    assert fresh["columns"] and fresh["indexes"]
    assert fresh == stepped


async def test_text_columns_compare_bytewise_and_keep_their_rows(
    pg_server: str, admin: asyncpg.Connection, fresh_schema: Callable[[], str]
) -> None:
    """Migration 10 gives every text column of psyq's tables the "C" collation; rows
    written before it are found through the rebuilt indexes."""
    schema = fresh_schema()
    await migrated(pg_server, schema, target=9)
    insert = "INSERT INTO {}.jobs (qkey, id, name, data, timestamp, state)"
    insert += " VALUES ($1, $2, 'n', '1', 1, 'waiting')"
    for job_id in ("é", "b", "B", "10", "9"):
        await admin.execute(insert.format(schema), "bull:q", job_id)
    assert await migrated(pg_server, schema) == [version for version in versions() if version > 9]
    columns = await admin.fetch(
        "SELECT table_name, column_name, collation_name FROM information_schema.columns"
        " WHERE table_schema = $1 AND data_type = 'text' AND table_name <> 'schema_migrations'",
        schema,
    )
    assert columns and {row["collation_name"] for row in columns} == {"C"}
    await admin.execute("SET enable_seqscan = off")
    try:
        ids = "SELECT id FROM {}.jobs WHERE qkey = $1 AND state = 'waiting' ORDER BY id"
        assert [row["id"] for row in await admin.fetch(ids.format(schema), "bull:q")] == [
            "10", "9", "B", "b", "é",
        ]  # fmt: skip
    finally:
        await admin.execute("RESET enable_seqscan")


async def test_migrating_twice_is_a_no_op(
    pg_server: str, admin: asyncpg.Connection, fresh_schema: Callable[[], str]
) -> None:
    schema = fresh_schema()
    await migrated(pg_server, schema)
    before = await catalog(admin, schema)
    assert await migrated(pg_server, schema) == []
    assert await catalog(admin, schema) == before
    ledger = await admin.fetch(
        "SELECT version FROM " + schema + ".schema_migrations ORDER BY version"
    )
    assert [row["version"] for row in ledger] == versions()


async def test_concurrent_migrators_are_serialised(
    pg_server: str, admin: asyncpg.Connection, fresh_schema: Callable[[], str]
) -> None:
    schema = fresh_schema()
    results = await asyncio.gather(*(migrated(pg_server, schema) for _ in range(6)))
    applied = sorted(version for result in results for version in result)
    assert applied == versions()  # each migration ran exactly once, in one migrator
    assert sorted(map(len, results)) == [0] * 5 + [len(versions())]
    count = await admin.fetchval("SELECT count(*) FROM " + schema + ".schema_migrations")
    assert count == len(versions())


async def test_backends_opening_at_once_share_one_migration(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    url = f"{pg_server}?schema={fresh_schema()}"
    backends = [PostgresBackend(url) for _ in range(4)]
    await asyncio.gather(*(backend.open() for backend in backends))
    try:
        added = await asyncio.gather(*(backend.add_jobs("q", [_plain()]) for backend in backends))
        assert sorted(int(records[0].id) for records in added) == [1, 2, 3, 4]
    finally:
        await asyncio.gather(*(backend.close() for backend in backends))


async def test_a_schema_from_a_newer_psyq_is_refused(
    pg_server: str, admin: asyncpg.Connection, fresh_schema: Callable[[], str]
) -> None:
    schema = fresh_schema()
    await migrated(pg_server, schema)
    await admin.execute(
        "INSERT INTO " + schema + ".schema_migrations (version, name) VALUES (9999, 'future')"
    )
    with pytest.raises(psyq.PsyqError, match="9999"):
        await migrated(pg_server, schema)


async def test_bad_schema_name_in_the_url_is_named(pg_server: str) -> None:
    with pytest.raises(psyq.InvalidURLError, match="Bad-Name"):
        PostgresBackend(f"{pg_server}?schema=Bad-Name")


def _plain() -> NewJob:
    return NewJob("x", "null", {})
