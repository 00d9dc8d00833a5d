"""`sqlite:///path`: the engine persisted to SQLite in WAL mode (the embedded default).

See backend.py for the URL, database.py for recovery and the write buffer, sharing/ for the
processes of one host sharing a file through its owner (an owner, a server and a client)."""

from psyq.backends.sqlite.backend import SqliteBackend, parse_sqlite_url
from psyq.backends.sqlite.export import SqliteExport
from psyq.backends.sqlite.lifecycle import is_open_here
from psyq.backends.sqlite.sharing.client import open_sqlite_backend

# SqliteExport and is_open_here: psyq migrate reads a file straight from its tables.
__all__ = [
    "SqliteBackend",
    "SqliteExport",
    "is_open_here",
    "open_sqlite_backend",
    "parse_sqlite_url",
]
