"""`postgresql://`: PostgreSQL through asyncpg, fetching with FOR UPDATE SKIP LOCKED.

See backend.py for the transitions, sql/ for the statements, migrations/ for the schema."""

from psyq.backends.postgres.backend import PostgresBackend, open_postgres_backend
from psyq.backends.postgres.config import parse_postgres_url

__all__ = ["PostgresBackend", "open_postgres_backend", "parse_postgres_url"]
