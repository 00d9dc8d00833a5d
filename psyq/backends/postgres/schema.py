"""The schema of BullMQ 6's Postgres layout: check its ledger, create or upgrade it.

The schema is BullMQ's (design record 0002): its migration files are read from the
installed `bullmq` PyPI package (`pip install 'psyq[postgres]'`), located without
importing it, and applied as every BullMQ client applies them: one transaction, under the
advisory lock all clients share, one ledger row per migration. A schema created by Node
BullMQ (`migrate: true`) or by bullmq for Python is used as it is.

A ledger that asks for a newer client than BullMQ 6 (its largest `min_client_version`) is
refused: psyq speaks the layout of BullMQ major 6 only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from psyq.backends.postgres.statements import load_statements
from psyq.errors import PsyqError

__all__ = [
    "CLIENT_MAJOR",
    "KNOWN_VERSION",
    "NEEDED_VERSION",
    "TESTED_WITH",
    "Ledger",
    "SchemaError",
    "bundled_migrations",
    "check_ledger",
    "ensure_schema",
]

CLIENT_MAJOR = 6  # the BullMQ major whose layout psyq speaks
NEEDED_VERSION = 4  # the oldest ledger psyq works with: what bullmq for Python 3.4 ships
# The newest migration psyq knows (Node bullmq 6.7.0's): a newer one found in the installed
# package is not applied (its minimum client is unknown until psyq is tested with it).
KNOWN_VERSION = 11
TESTED_WITH = "Node bullmq 6.7.0 (ledger version 11) and bullmq for Python 3.4.4 (version 4)"
_MIGRATION_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


class SchemaError(PsyqError):
    """The schema cannot be used: missing, too old without a way to upgrade, or too new."""


@dataclass(frozen=True, slots=True)
class Ledger:
    version: int  # newest migration applied (0: none)
    min_client_version: int | None  # largest minimum client major of those applied


def check_ledger(ledger: Ledger, schema: str) -> None:
    """Raise SchemaError when the ledger asks for a BullMQ newer than major 6."""
    wanted = ledger.min_client_version
    if wanted is not None and wanted > CLIENT_MAJOR:
        raise SchemaError(
            f"Postgres schema {schema!r} was migrated for BullMQ {wanted} or newer (ledger "
            f"version {ledger.version}); psyq speaks BullMQ {CLIENT_MAJOR}'s layout (tested "
            f"with {TESTED_WITH}). Upgrade psyq, or use another schema (?schema=)."
        )


def bundled_migrations() -> list[tuple[int, str, str]] | None:
    """(version, name, SQL) of the migrations in the installed `bullmq` package, in version
    order, or None when the package is not installed."""
    package = _bullmq_folder()
    folder = package / "postgres" / "migrations" if package is not None else None
    if folder is None or not folder.is_dir():
        return None
    found = []
    for path in folder.iterdir():
        match = _MIGRATION_FILE.fullmatch(path.name)
        if match:
            version = int(match.group(1))
            found.append((version, f"{match.group(1)}_{match.group(2)}", path.read_text("utf-8")))
    return sorted(found)


def _bullmq_folder() -> Path | None:
    """Where the installed `bullmq` distribution put its package, by the distribution's
    record rather than by import: `import bullmq` may give another module, as when
    `bullmq`'s own test suite runs against psyq.compat.bullmq under that name."""
    try:
        return Path(str(importlib.metadata.distribution("bullmq").locate_file("bullmq")))
    except importlib.metadata.PackageNotFoundError:
        return None


async def read_ledger(conn: asyncpg.Connection, schema: str) -> Ledger | None:
    """The ledger of `schema` (the connection's search_path), or None when it has none."""
    q = load_statements()
    if not await conn.fetchval(q["schema.ledger_exists"], schema):
        return None
    row = await conn.fetchrow(q["schema.ledger"])
    assert row is not None
    return Ledger(row["version"], row["min_client_version"])


async def ensure_schema(conn: asyncpg.Connection, schema: str) -> Ledger:
    """Make `schema` usable: check its ledger, apply the bundled BullMQ migrations it
    lacks (when the `bullmq` package is installed), and add psyq's own tables (and the
    group objects, sql/groups.sql). Returns
    the ledger afterwards."""
    ledger = await read_ledger(conn, schema)
    if ledger is not None:
        check_ledger(ledger, schema)
    if ledger is None or ledger.version < NEEDED_VERSION:
        bundled = bundled_migrations()
        if bundled is None:
            raise SchemaError(_cannot_create(schema, ledger))
        ledger = await _migrate(conn, schema, bundled)
    q = load_statements()
    async with conn.transaction():
        await conn.execute(q["schema.lock"], schema)
        await conn.execute(q["registry.create"])
        await _ensure_groups(conn)
    return ledger


async def _ensure_groups(conn: asyncpg.Connection) -> None:
    """psyq's group objects (sql/groups.sql), made again when their statement changed."""
    q = load_statements()
    fingerprint = hashlib.sha256(q["groups.create"].encode()).hexdigest()[:16]
    if not await conn.fetchval(q["groups.installed"], fingerprint):
        await conn.execute(q["groups.create"])
        await conn.execute(await conn.fetchval(q["groups.mark_statement"], fingerprint))


async def _migrate(
    conn: asyncpg.Connection, schema: str, bundled: list[tuple[int, str, str]]
) -> Ledger:
    q = load_statements()
    async with conn.transaction():
        await conn.execute(q["schema.lock"], schema)
        await conn.execute(await conn.fetchval(q["schema.create_schema_statement"], schema))
        await conn.execute(await conn.fetchval(q["schema.search_path_statement"], schema))
        await conn.execute(q["schema.create_ledger"])
        await conn.execute(q["schema.ledger_client_column"])
        row = await conn.fetchrow(q["schema.ledger"])
        assert row is not None
        ledger = Ledger(row["version"], row["min_client_version"])
        check_ledger(ledger, schema)
        for version, name, sql in bundled:
            if ledger.version < version <= KNOWN_VERSION:
                await conn.execute(sql)
                await conn.execute(q["schema.record"], version, name, CLIENT_MAJOR)
        row = await conn.fetchrow(q["schema.ledger"])
        assert row is not None
    ledger = Ledger(row["version"], row["min_client_version"])
    if ledger.version < NEEDED_VERSION:
        raise SchemaError(
            f"Postgres schema {schema!r} is at BullMQ ledger version {ledger.version}, and "
            f"the installed bullmq package brings it only there; psyq needs version "
            f"{NEEDED_VERSION} or later (pip install -U 'psyq[postgres]')"
        )
    return ledger


def _cannot_create(schema: str, ledger: Ledger | None) -> str:
    state = (
        "has no BullMQ layout"
        if ledger is None
        else f"is at BullMQ ledger version {ledger.version} (psyq needs {NEEDED_VERSION})"
    )
    return (
        f"Postgres schema {schema!r} {state}. Let psyq create it from BullMQ's own "
        "migrations (pip install 'psyq[postgres]'), or create it with a BullMQ 6 "
        "client first (Node: connection option migrate: true)."
    )
