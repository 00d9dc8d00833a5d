"""`postgresql://`: PostgreSQL through asyncpg, fetching with FOR UPDATE SKIP LOCKED.

See backend.py for the transitions, sql/ for the statements, migrations/ for the schema.
asyncpg is imported only when a Postgres backend is used (`pip install 'psyq[postgres]'`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psyq.backends.postgres.config import parse_postgres_url
from psyq.errors import InvalidURLError

if TYPE_CHECKING:
    from psyq.backends.base import BackendAdapter
    from psyq.backends.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend", "open_postgres_backend", "parse_postgres_url"]


def open_postgres_backend(url: str) -> BackendAdapter:
    """Entry point of the `postgres` and `postgresql` schemes: psyq's private layout, or
    BullMQ 6's layout with `?layout=bullmq`."""
    layout = parse_postgres_url(url).layout
    try:
        from psyq.backends.postgres.backend import PostgresBackend

        if layout == "bullmq":
            from psyq.backends.postgres.bullmq.backend import BullmqPostgresBackend

            return BullmqPostgresBackend(url)
    except ModuleNotFoundError as exc:
        if exc.name != "asyncpg":
            raise
        raise InvalidURLError(
            url, "the postgres backend needs asyncpg: pip install 'psyq[postgres]'"
        ) from None
    return PostgresBackend(url)


def __getattr__(name: str) -> Any:
    if name == "PostgresBackend":
        from psyq.backends.postgres.backend import PostgresBackend

        return PostgresBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
