"""`sqlite:///path/jobs.db`: the engine, persisted to SQLite (WAL).

    sqlite:///jobs.db                      relative path; sqlite:////abs/jobs.db absolute
    ?durability=buffered|durable           buffered (default): a crash loses at most the
                                           job changes not yet committed (one window in
                                           normal running; calls wait once 4 x
                                           flush_changes are pending); durable: calls
                                           return after their commit
    ?flush_changes=100&flush_ms=10         when the write buffer flushes
    ?cache=50000                           records of jobs a queue keeps in memory beyond
                                           those it needs (active jobs, unwritten
                                           changes); the rest are read from the file
    ?prefix=bull                           key prefix, as everywhere
    ?share=on|off                          on (default): a second process of this host
                                           reaches the file through its owner (sharing/client.py);
                                           off: it is refused, and this owner serves none

Every call runs on the in-memory engine, which keeps each queue's lines in memory and the
records of jobs it does not need there in the file (psyq.backends.sqlite.resident); changes
reach the file through the Database's write buffer. A job added with the `durable` option is
committed before `add` returns, whatever the URL says.
"""

from __future__ import annotations

import contextvars
import functools
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from psyq.backends.base import FlowNode, FlowTree, JobRecord, NewJob
from psyq.backends.engine.memory import MemoryBackend
from psyq.backends.engine.store import QueueStore
from psyq.backends.sqlite.database import CACHE, Database
from psyq.backends.sqlite.lifecycle import open_database, release_database
from psyq.backends.sqlite.sharing.server import Sharer, share_address
from psyq.errors import InvalidURLError
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["SqliteBackend", "parse_sqlite_url", "start_sharing"]

T = TypeVar("T")
_TICKET: contextvars.ContextVar[int] = contextvars.ContextVar("psyq_sqlite_ticket", default=0)

MODES = ("buffered", "durable")
SHARE = ("on", "off")
# Buffered mode: callers wait for the writer once it is this many flushes behind.
BACKLOG_WINDOWS = 4
DEFAULTS = {
    "durability": "buffered",
    "flush_changes": "100",
    "flush_ms": "10",
    "cache": str(CACHE),
    "prefix": DEFAULT_PREFIX,
    "share": "on",
}


def parse_sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    """(file path, settings) of a sqlite:// URL, or InvalidURLError naming the problem."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc not in ("", "localhost"):
        raise InvalidURLError(url, "expected sqlite:///relative/path.db or sqlite:////abs.db")
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if not path:
        raise InvalidURLError(url, "it names no file (sqlite:///jobs.db)")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - set(DEFAULTS))
    if unknown:
        raise InvalidURLError(url, f"unknown parameters {unknown}; known: {sorted(DEFAULTS)}")
    settings = {**DEFAULTS, **query}
    if settings["durability"] not in MODES:
        raise InvalidURLError(url, f"durability must be one of {MODES}")
    if settings["share"] not in SHARE:
        raise InvalidURLError(url, f"share must be one of {SHARE}")
    for name in ("flush_changes", "flush_ms", "cache"):
        if not settings[name].isdigit() or int(settings[name]) < 1:
            raise InvalidURLError(url, f"{name} must be a whole number >= 1")
    return path, settings


class SqliteBackend(MemoryBackend):
    kind = "sqlite"

    def __init__(self, url: str, database: Database | None = None) -> None:
        """`database`: the file, opened already for this backend (sharing/client.py's factory)."""
        path, settings = parse_sqlite_url(url)
        self.path = path
        self.durable = settings["durability"] == "durable"
        self._settings = settings
        self._db: Database | None = None
        self._opened = database
        prefix = settings["prefix"]
        super().__init__(f"memory://?prefix={prefix}")
        self.url = url

    async def open(self) -> None:
        db, self._opened = self._opened, None
        db = db or open_sqlite_file(self.url)
        self.attach(db)
        if self._settings["share"] == "on":
            start_sharing(db, self.url)

    def attach(self, db: Database) -> None:
        """Run on `db`'s engine (this backend releases it on close)."""
        self._db = db
        self.engine = db.engine
        self._clock = db.engine.clock

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            release_database(db)

    async def check_ready(self) -> None:
        """The file is still the one opened, and its last flush wrote."""
        if self._db is not None:
            self._db.check_storing()

    def _check(self) -> None:
        """Raise when the file can no longer be used (gone, or opened before a fork)."""
        if self._db is not None:
            self._db.check()

    def _run(self, queue: str, action: Callable[[QueueStore], T], notify: bool = False) -> T:
        self._check()  # the file is gone: nothing more is acknowledged
        changed: list[int] = []

        def tracked(store: QueueStore) -> T:
            assert store.dirty is not None
            before = (store.version, store.events.next_seq, len(store.dirty))
            result = action(store)
            if (store.version, store.events.next_seq) != before[:2]:
                changed.append(max(1, len(store.dirty) - before[2]))  # jobs it touched
            return result

        result = super()._run(queue, tracked, notify)
        if changed and self._db is not None:
            _TICKET.set(self._db.note_change(sum(changed)))
        return result

    async def wait_committed(self) -> None:
        """Buffered or durable: return once a commit holds every change made so far."""
        if self._db is not None:
            await self._commit(self._db.note_change(0))

    async def _commit(self, ticket: int) -> None:
        if ticket and self._db is not None:
            await self._db.flushed(ticket)

    async def _settle_writes(self, force: bool) -> None:
        """Durable: wait for this call's commit. Buffered: wait only when the writer is
        behind by more than BACKLOG_WINDOWS flush windows, which bounds what a crash loses."""
        db = self._db
        if db is None:
            return
        ticket = _TICKET.get()
        if force or db.backlog > BACKLOG_WINDOWS * db.flush_changes:
            await self._commit(ticket)
        elif db.backlog >= db.flush_changes:
            db.flush()  # a full window: write it now, in this thread

    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        _TICKET.set(0)
        records = await super().add_jobs(queue, jobs)
        await self._settle_writes(self.durable or any(new.opts.get("durable") for new in jobs))
        return records

    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """Flows change several queues under every lock, outside `_run`: count them here."""
        self._check()
        records = await super().add_flow(roots)
        if self._db is not None:
            _TICKET.set(self._db.note_change(len(records)))
        await self._settle_writes(self.durable or any(r.opts.get("durable") for r in records))
        return records

    async def list_queues(self) -> list[str]:
        self._check()
        return await super().list_queues()

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> FlowTree | None:
        self._check()
        return await super().get_flow(queue, job_id, depth, max_children)

    async def obliterate(self, queue: str, force: bool) -> None:
        await super().obliterate(queue, force)  # the engine's drop queues the rows' removal
        if self._db is not None:
            ticket = self._db.note_change()
            if self.durable:
                await self._commit(ticket)


def _durable(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """In durable mode, the call returns once its change is committed."""

    @functools.wraps(method)
    async def call(self: SqliteBackend, *args: Any, **kwargs: Any) -> T:
        _TICKET.set(0)
        result = await method(self, *args, **kwargs)
        await self._settle_writes(self.durable)
        return result

    return call


_MUTATIONS = (
    "move_to_active",
    "move_to_finished",
    "retry_job",
    "move_to_delayed",
    "move_job_from_active_to_wait",
    "move_stalled_jobs_to_wait",
    "update_progress",
    "add_log",
    "clear_logs",
    "update_data",
    "change_priority",
    "change_delay",
    "promote",
    "reprocess_job",
    "remove_job",
    "pause",
    "resume",
    "drain",
    "clean",
    "retry_jobs",
    "promote_jobs",
    "move_to_waiting_children",
    "upsert_job_scheduler",
    "remove_job_scheduler",
    "rate_limit",
    "remove_rate_limit_key",
    "set_global_rate_limit",
    "set_global_concurrency",
    "remove_deduplication_key",
    "set_max_len_events",
    "import_jobs",
    "set_queue_meta",
)
for _name in _MUTATIONS:
    setattr(SqliteBackend, _name, _durable(getattr(MemoryBackend, _name)))


def open_sqlite_file(url: str, create: bool = True) -> Database:
    """The process's Database for the file `url` names (FileInUse: another process owns
    it; `create`: make the file when the path names none)."""
    path, settings = parse_sqlite_url(url)
    flush_changes, flush_ms = int(settings["flush_changes"]), int(settings["flush_ms"])
    return open_database(path, flush_changes, flush_ms, int(settings["cache"]), create)


def start_sharing(db: Database, url: str) -> None:
    """Serve the file `db` holds to this host's other processes, with the settings of
    `url`, unless it is served already."""
    settings = parse_sqlite_url(url)[1]
    info = {name: settings[name] for name in SHARED_SETTINGS}
    address = share_address(db.path, db.owner.identity)
    with _SHARING:  # two threads opening the file at once start one server
        if db.sharer is None:
            db.sharer = Sharer(address, functools.partial(_served, db, url), info)


_SHARING = threading.Lock()


def _new_sharing_lock() -> None:
    global _SHARING
    _SHARING = threading.Lock()  # another thread may have held it at a fork


os.register_at_fork(after_in_child=_new_sharing_lock)

# What a process reaching the file through its owner must agree with (sharing/client.py).
SHARED_SETTINGS = ("durability", "prefix")


def _served(db: Database, url: str) -> SqliteBackend:
    """The adapter the owner serves: its engine, never closed by the server."""
    backend = SqliteBackend(url)
    backend.attach(db)
    return backend
