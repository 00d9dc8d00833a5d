"""The SQLite schema, versioned with `PRAGMA user_version`, created and upgraded on open.

`MIGRATIONS[i]` takes a database from version i to i + 1. A new version appends a migration
and never edits an old one; `tests/sqlite/test_schema.py` checks that a database built by
every migration has the same schema as one built fresh from `SCHEMA`.
"""

from __future__ import annotations

import sqlite3

import msgpack

from psyq.errors import PsyqError

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "body_priority", "migrate"]

# One row per queue: its settings (paused, id counter, limits, schedulers, dedup keys, ...).
# One row per job: its place in its line (`rank`, `due`, `priority`), finish time, the rest
# of the record as a MessagePack array (rows.BODY lists its fields), its children (`deps`)
# and logs. `jobs_finished` orders the finished lines by rank (the order jobs finished in),
# so their counts and a page of old jobs are index seeks; the other lines are read once, in
# one pass over the queue's rows, when the file opens (an index on them cost a third more
# per job written: design record 0005).
# The event feed in chunks (one per flush: a JSON list of [ms, name, jobId, extra]),
# bounded per queue like the in-memory log.
SCHEMA_V1 = """
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

# Version 2: the priority column and the index of finished lines; finished jobs of older
# files are ranked in the order they finished (`psyq_priority` reads a body's priority: see
# migrate).
_PRIORITY_COLUMN = "priority INTEGER NOT NULL DEFAULT 0"
_FINISHED_INDEX = (
    "CREATE INDEX jobs_finished ON jobs (queue, state, rank) "
    "WHERE state IN ('completed', 'failed');"
)
LINE_INDEX = f"""
ALTER TABLE jobs ADD COLUMN {_PRIORITY_COLUMN};
UPDATE jobs SET priority = psyq_priority(body) WHERE state = 'prioritized';
UPDATE jobs SET rank = numbered.place FROM (
    SELECT queue AS q, id AS i,
           row_number() OVER (PARTITION BY queue ORDER BY finished_on, id) AS place
    FROM jobs WHERE state IN ('completed', 'failed')
) AS numbered WHERE jobs.queue = numbered.q AND jobs.id = numbered.i;
{_FINISHED_INDEX}
"""

# Version 3: the name the file's journal is kept by (`file`, key 'name': sqlite/names.py) and
# each queue's reserved job ids (`id_blocks`: every id up to `reserved` may have been handed
# out, so a new id starts above it; sqlite/ids.py).
FILE_AND_IDS = """
CREATE TABLE file (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE id_blocks (
    queue TEXT PRIMARY KEY,
    reserved INTEGER NOT NULL
) WITHOUT ROWID;
"""

# Version 4: the group of a job (its `group` option's id; NULL: none), so a file opens with
# each grouped waiting job in its group's line without reading its body; for such a job the
# `priority` column holds its group priority, its place in that line.
_GROUP_COLUMN = "grp TEXT"
GROUP_COLUMN = f"ALTER TABLE jobs ADD COLUMN {_GROUP_COLUMN};"

# The schema every migration gives: SQLite keeps an added column where ALTER put it, on the
# line of the last column.
SCHEMA = (
    SCHEMA_V1.replace("    logs TEXT,\n", f"    logs TEXT, {_PRIORITY_COLUMN}, {_GROUP_COLUMN},\n")
    + _FINISHED_INDEX
    + "\n"
    + FILE_AND_IDS
)

MIGRATIONS: list[str] = [SCHEMA_V1, LINE_INDEX, FILE_AND_IDS, GROUP_COLUMN]
SCHEMA_VERSION = len(MIGRATIONS)
_PRIORITY = 5  # the priority's place in a job row's body (rows.BODY)


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the database to SCHEMA_VERSION, one transaction per migration."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise PsyqError(
            f"{path} has schema version {version}, newer than this psyq ({SCHEMA_VERSION}); "
            "upgrade psyq"
        )
    conn.create_function("psyq_priority", 1, body_priority, deterministic=True)
    for number in range(version, SCHEMA_VERSION):
        step = MIGRATIONS[number]
        conn.executescript(f"BEGIN; {step}; PRAGMA user_version = {number + 1}; COMMIT;")


def body_priority(body: bytes) -> int:
    """The priority stored in a job row's body."""
    priority: int = msgpack.unpackb(body)[_PRIORITY]
    return priority
