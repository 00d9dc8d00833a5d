"""The SQLite schema, versioned with `PRAGMA user_version`, created and upgraded on open.

`MIGRATIONS[i]` takes a database from version i to i + 1. A new version appends a migration
and never edits an old one; `tests/sqlite/test_schema.py` checks that a database built by
every migration has the same schema as one built fresh from `SCHEMA`.
"""

from __future__ import annotations

import sqlite3

from psyq.errors import PsyqError

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "migrate"]

# One row per queue: its settings (paused, id counter, limits, schedulers, dedup keys, ...).
# One row per job: its place in its line (`rank`, `due`), finish time, the rest of the record
# as a MessagePack array (rows.BODY lists its fields), its children (`deps`) and logs.
# The event feed in chunks (one per flush: a JSON list of [ms, name, jobId, extra]),
# bounded per queue like the in-memory log.
SCHEMA = """
CREATE TABLE queues (
    key TEXT PRIMARY KEY,
    meta TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE jobs (
    queue TEXT NOT NULL,
    id TEXT NOT NULL,
    state TEXT NOT NULL,
    rank INTEGER,
    due INTEGER,
    finished_on INTEGER,
    body BLOB NOT NULL,
    deps TEXT,
    logs TEXT,
    PRIMARY KEY (queue, id)
) WITHOUT ROWID;
CREATE TABLE events (
    queue TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (queue, first_seq)
) WITHOUT ROWID;
"""

MIGRATIONS: list[str] = [SCHEMA]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the database to SCHEMA_VERSION, one transaction per migration."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise PsyqError(
            f"{path} has schema version {version}, newer than this psyq ({SCHEMA_VERSION}); "
            "upgrade psyq"
        )
    for number in range(version, SCHEMA_VERSION):
        step = MIGRATIONS[number]
        conn.executescript(f"BEGIN; {step}; PRAGMA user_version = {number + 1}; COMMIT;")
