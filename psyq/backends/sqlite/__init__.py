"""`sqlite:///path`: the native engine persisted to SQLite in WAL mode (the embedded default).

See backend.py for the URL, database.py for ownership, recovery and the write buffer."""

from psyq.backends.sqlite.backend import SqliteBackend, open_sqlite_backend, parse_sqlite_url

__all__ = ["SqliteBackend", "open_sqlite_backend", "parse_sqlite_url"]
