"""Create and upgrade the backend's schema by versioned migrations (`migrations/NNNN_*.sql`).

Everything runs in one transaction that first takes an advisory lock named after the
schema: concurrent migrators run one after the other, and the second finds nothing to do.
A database migrated by a newer psyq (a version this one does not know) is refused.
"""

from __future__ import annotations

import asyncpg

from psyq.backends.postgres.queries import load_queries, migrations
from psyq.errors import PsyqError

__all__ = ["migrate"]


async def migrate(conn: asyncpg.Connection, schema: str, target: int | None = None) -> list[int]:
    """Apply the migrations of `schema` up to `target` (all by default); returns the
    versions applied now. `conn` must have `search_path` set to `schema`."""
    q = load_queries()
    known = [m for m in migrations() if target is None or m[0] <= target]
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute(q["migrate.lock"], schema)
        await conn.execute(await conn.fetchval(q["migrate.create_schema_statement"], schema))
        await conn.execute(q["migrate.ledger"])
        applied = {row[0] for row in await conn.fetch(q["migrate.applied"])}
        _refuse_unknown(applied, schema)
        for version, name, sql in known:
            if version not in applied:
                await conn.execute(sql)
                await conn.execute(q["migrate.record"], version, name)
                applied_now.append(version)
    return applied_now


def _refuse_unknown(applied: set[int], schema: str) -> None:
    newest = max((m[0] for m in migrations()), default=0)
    unknown = sorted(v for v in applied if v > newest)
    if unknown:
        raise PsyqError(
            f"schema {schema!r} has migrations {unknown} from a newer psyq (this one knows up "
            f"to {newest}); upgrade psyq"
        )
