"""Reading a psyq SQLite file's queues straight from its tables, without the engine.

`SqliteExport` answers what a migration reads of a source — `list_queues`,
`get_job_counts`, `get_queue_meta`, `export_jobs` — with SQL on a read-only connection,
without opening the engine (no owner's lock needed beside it): the first page of a queue
costs one sorted scan of that queue's rows, and every page after it is read from the same
open statement.

Pages are those the engine would give for the same file: the same jobs, fields, order, logs,
due times and flow links, in the order of the engine's lines: waiting by rank; prioritized
by (priority, rank, id), delayed by (due, rank, id), as the heap and the delayed set sort;
then active, waiting-children, completed and failed by (rank, finished_on, id), NULLs
first.

Ownership: `own=True` takes the file's lock, as the engine does, so no process writes while
it is read (the migration driver). `own=False` reads beside the owner (Spark tasks, while the
driver holds the lock); SQLite's WAL lets any number of read-only connections read at once.
An export is one SQL statement, so its pages are a consistent snapshot; its cursor (like the
engine's) is valid in the process that started the export.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from psyq.backends.base import JOB_STATES, ExportPage, QueueMeta
from psyq.backends.engine import transfer
from psyq.backends.engine.engine import Engine
from psyq.backends.sqlite import rows
from psyq.backends.sqlite.backend import parse_sqlite_url
from psyq.backends.sqlite.names import journal_name
from psyq.backends.sqlite.schema import SCHEMA_VERSION
from psyq.backends.sqlite.sharing.owner import Owner
from psyq.errors import PsyqError

__all__ = ["EXPORT_COLUMNS", "EXPORT_QUERY", "SqliteExport"]

MAX_OPEN_EXPORTS = 16  # open export statements kept for cursors; the oldest goes first
SORT_CACHE_KIB = 64 * 1024  # memory SQLite may sort a queue in before it spills to disk

# Each state's place in an export (a paused queue's waiting jobs are stored as waiting).
_POSITION = {state: index for index, state in enumerate(transfer.EXPORT_ORDER)}
_POSITION["paused"] = _POSITION["waiting"]
_GROUP = " ".join(f"WHEN '{state}' THEN {place}" for state, place in _POSITION.items())

# One queue's jobs in export order (see the module docstring): only the columns a page is
# made of (each column read costs SQLite calls under its connection mutex, per row).
EXPORT_COLUMNS = "id, state, finished_on, body, due, deps, logs"
EXPORT_QUERY = f"""
SELECT {EXPORT_COLUMNS} FROM jobs WHERE queue = ?
ORDER BY
    CASE state {_GROUP} ELSE {len(transfer.EXPORT_ORDER)} END,
    CASE state WHEN 'prioritized' THEN priority
               WHEN 'delayed' THEN coalesce(due, 0) ELSE rank END,
    CASE WHEN state IN ('prioritized', 'delayed') THEN coalesce(rank, 0) ELSE finished_on END,
    id
"""


@dataclass
class _OpenExport:
    """One export in progress: its statement, the offset of its next page, and the row read
    ahead to tell whether another page follows."""

    statement: sqlite3.Cursor
    offset: int = 0
    ahead: list[Any] = field(default_factory=list)


class SqliteExport:
    """A psyq SQLite file, read for export (see the module docstring)."""

    def __init__(self, url: str, own: bool = True) -> None:
        path, settings = parse_sqlite_url(url)
        self.url = url
        self.path = path
        self.own = own
        self._prefix = settings["prefix"] + ":"
        self._owner: Owner | None = None
        self._conn: sqlite3.Connection | None = None
        self._exports: OrderedDict[str, _OpenExport] = OrderedDict()

    async def open(self) -> None:
        if self.own:
            self._owner = Owner(self.path, write=False)
        try:
            self._conn = _connect_read_only(journal_name(self.path))
        except BaseException:
            self._let_go()
            raise

    async def close(self) -> None:
        for export in self._exports.values():
            export.statement.close()
        self._exports.clear()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._let_go()

    def _let_go(self) -> None:
        if self._owner is not None:
            owner, self._owner = self._owner, None
            owner.release()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise PsyqError(f"{self.url!r} is not open for export")
        return self._conn

    # ------------------------------------------------------------------ queues
    async def list_queues(self) -> list[str]:
        keys = {key for (key,) in self.conn.execute("SELECT key FROM queues")}
        keys.update(rows.queue_keys(self.conn))
        prefix = self._prefix
        return sorted(key[len(prefix) :] for key in keys if key.startswith(prefix))

    async def get_queue_meta(self, queue: str) -> QueueMeta:
        """The queue's stored settings, as the engine gives them once it opens the file."""
        store = Engine(persistent=True).store_for_key(self._prefix + queue)
        row = self.conn.execute(
            "SELECT meta FROM queues WHERE key = ?", (self._prefix + queue,)
        ).fetchone()
        if row is not None:
            rows.restore_meta(store, json.loads(row[0]))
        reserved = self.conn.execute(
            "SELECT reserved FROM id_blocks WHERE queue = ?", (self._prefix + queue,)
        ).fetchone()
        if reserved is not None:  # ids up to it may have been handed out (Database)
            store.last_id = max(store.last_id, reserved[0])
        return transfer.queue_meta(store)

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]:
        stored = dict(
            self.conn.execute(
                "SELECT state, count(*) FROM jobs WHERE queue = ? GROUP BY state",
                (self._prefix + queue,),
            ).fetchall()
        )
        waiting = stored.pop("waiting", 0)
        paused = (await self.get_queue_meta(queue))["paused"]
        stored["paused" if paused else "waiting"] = waiting
        return {state: stored.get(state, 0) for state in states or JOB_STATES}

    # ------------------------------------------------------------------ export
    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        if limit < 1:
            raise PsyqError(f"export limit must be >= 1, got {limit!r}")
        token, export = self._export(queue, cursor)
        fetched = export.ahead + export.statement.fetchmany(limit + 1 - len(export.ahead))
        export.ahead = fetched[limit:]
        page = export_page(queue, fetched[:limit])
        page.key_prefix = self._prefix[:-1]
        if export.ahead:
            export.offset += limit
            page.next_cursor = f"{token}:{export.offset}"
        else:
            export.statement.close()
            del self._exports[token]
        return page

    def _export(self, queue: str, cursor: str | None) -> tuple[str, _OpenExport]:
        """A new export's statement, or the one `cursor` continues (its next page only)."""
        if cursor is None:
            token = uuid.uuid4().hex
            statement = self.conn.execute(EXPORT_QUERY, (self._prefix + queue,))
            self._exports[token] = _OpenExport(statement)
            while len(self._exports) > MAX_OPEN_EXPORTS:
                self._exports.popitem(last=False)[1].statement.close()
            return token, self._exports[token]
        token, _, offset = cursor.partition(":")
        export = self._exports.get(token)
        if export is None or offset != str(export.offset):
            raise PsyqError(
                f"export cursor {cursor!r} is unknown, expired or not the next page; start "
                "again with cursor=None"
            )
        return token, export


def export_page(queue: str, fetched: Sequence[Sequence[Any]]) -> ExportPage:
    """An export page of job rows (`EXPORT_COLUMNS`) of `queue`, in their order."""
    page = ExportPage(jobs=[], logs={}, next_cursor=None)
    jobs, record_of = page.jobs, rows.body_record
    for job_id, state, finished_on, body, due, deps, logs in fetched:
        if state not in _POSITION:
            raise PsyqError(
                f"cannot export job {job_id!r} of queue {queue!r}: unknown state {state!r}"
            )
        jobs.append(record_of(queue, job_id, state, finished_on, body, False))
        if logs is not None:
            page.logs[job_id] = json.loads(logs)
        if state == "delayed":
            page.due[job_id] = due or 0
        if deps is not None:
            page.deps[job_id] = _links(json.loads(deps))
    return page


def _links(stored: dict[str, Any]) -> dict[str, Any]:
    """A parent's children as the engine exports them once rebuilt (pending keys sorted)."""
    return {
        "pending": sorted(set(stored["pending"])),
        "processed": dict(stored["processed"]),
        "failed": dict(stored["failed"]),
        "ignored": dict(stored["ignored"]),
    }


def _connect_read_only(path: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, check_same_thread=False)
        (version,) = conn.execute("PRAGMA user_version").fetchone()
    except sqlite3.DatabaseError as exc:
        raise PsyqError(f"cannot read {path} as a psyq database: {exc}") from None
    if version != SCHEMA_VERSION:
        conn.close()
        raise PsyqError(
            f"{path} has schema version {version}, this psyq reads version {SCHEMA_VERSION} "
            "(open it once with this psyq to upgrade it; version 0: not a psyq file)"
        )
    conn.execute(f"PRAGMA cache_size = -{SORT_CACHE_KIB}")
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn
