"""The process's open databases: one `Database` per file, whatever path names it, shared by
every backend of the process that opens it (`open_database`, `release_database`); at a
normal interpreter exit each still open is flushed; a forked child lets go of those it
inherited (`Database.let_go_in_child`) and opens its own after the fork."""

from __future__ import annotations

import atexit
import logging
import os
import threading

from psyq.backends.sqlite.database import CACHE, Database
from psyq.backends.sqlite.sharing.owner import Identity, file_identity

__all__ = ["is_open_here", "open_database", "release_database"]

log = logging.getLogger("psyq.sqlite")

_OPEN: dict[Identity, tuple[Database, int]] = {}  # by the file, whatever path named it
_OPEN_LOCK = threading.Lock()


def open_database(
    path: str, flush_changes: int, flush_ms: int, cache: int = CACHE, create: bool = True
) -> Database:
    """The process's Database for the file at `path` (opened on first use, shared after,
    through any path to it: the first opener's settings hold; `create`: make the file
    when `path` names none)."""
    with _OPEN_LOCK:
        entry = _OPEN.get(file_identity(path) or (-1, -1))
        if entry is None:
            entry = (Database(path, flush_changes, flush_ms, cache, create), 0)
        db = entry[0]
        _OPEN[db.owner.identity] = (db, entry[1] + 1)
        return db


def is_open_here(path: str) -> bool:
    """Whether this process has the file at `path` open through `open_database`."""
    with _OPEN_LOCK:
        return file_identity(path) in _OPEN


def release_database(database: Database) -> None:
    if database.forked:
        return  # the parent's: never closed here (Database.let_go_in_child)
    identity = database.owner.identity
    with _OPEN_LOCK:
        db, users = _OPEN[identity]
        if users > 1:
            _OPEN[identity] = (db, users - 1)
            return
        del _OPEN[identity]
    database.close()


def _flush_at_exit() -> None:
    """At a normal interpreter exit, write what every file this process opened still
    buffers: an application that returns from `asyncio.run` without closing its queues
    loses nothing. The files stay open (a later exit hook may still close them)."""
    with _OPEN_LOCK:
        databases = [db for db, _ in _OPEN.values() if db.pid == os.getpid()]
    for db in databases:
        if not db.flush_reporting():
            log.error("psyq: exiting with changes to %s that could not be written", db.path)


atexit.register(_flush_at_exit)


_FORKED_AWAY: list[Database] = []  # the parent's, kept so that no collection closes them


def _after_fork_in_child() -> None:
    """A forked child starts with no open database: those it inherited are the parent's
    (the parent's engine, connections and id counters, without its threads), so each is
    let go of and refuses every call, and an open after the fork reaches the file as any
    other process does (through its owner, the parent while it lives)."""
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()  # another thread may have held it at the fork
    for db, _users in _OPEN.values():
        db.let_go_in_child()
        _FORKED_AWAY.append(db)
    _OPEN.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
