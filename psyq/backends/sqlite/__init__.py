"""`sqlite:///path`: the native engine persisted to SQLite in WAL mode (the embedded default).

See backend.py for the URL, database.py for ownership, recovery and the write buffer,
peer.py and serve.py for the processes of one host sharing a file through its owner."""

from psyq.backends.sqlite.backend import SqliteBackend, parse_sqlite_url
from psyq.backends.sqlite.peer import open_sqlite_backend

__all__ = ["SqliteBackend", "open_sqlite_backend", "parse_sqlite_url"]
