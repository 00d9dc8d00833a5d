"""`postgresql://`: PostgreSQL through asyncpg, queues stored in BullMQ 6's own layout, shared
with Node BullMQ 6 and bullmq for Python (backend.py lists the modules; design record 0002).

asyncpg, and the `bullmq` package whose migration files create the schema, are needed only
when a Postgres backend is used (`pip install 'psyq[postgres]'`).
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
    """Entry point of the `postgres` and `postgresql` schemes."""
    parse_postgres_url(url)  # a bad URL fails here, naming the parameter
    try:
        from psyq.backends.postgres.backend import PostgresBackend
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
