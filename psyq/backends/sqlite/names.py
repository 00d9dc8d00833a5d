"""One name per database file: the name SQLite keeps its journal by.

SQLite names a database's journal (`-wal`, `-shm`) after the path it opened, with symlinks
resolved but not hard links: a process that opened a file by another of its hard links
would neither see the frames another process left in its journal (a kill -9 leaves them
there) nor put its own where the next opener looks, and the two journals would later be
replayed over each other. So every process opens a file by one name:

- a file with one name (any symlink, `..` or relative path resolved): that name;
- a file with several hard links: the name psyq recorded in the file itself (table
  `file`, key 'name', written into the main file, not only its journal, so that another
  name reads it without the journal), when that name still names this file; else the
  file is refused, naming what to do.

The owner records its name each time it opens the file (`record_name`), so a renamed
file's record follows it; a file renamed while the journal of its old name is still there
(moved after a crash) is refused, naming that journal, since its last changes are there.
A journal left where its file was (the file moved or deleted while a process had it open)
is refused too (`refuse_stale_journal`): a file opened there would share that journal
with a file it does not belong to.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from psyq.backends.sqlite.sharing.owner import file_identity
from psyq.errors import PsyqError

__all__ = ["journal_left", "journal_name", "record_name", "refuse_stale_journal"]

_RECORDED = "SELECT value FROM file WHERE key = 'name'"


def journal_name(path: str) -> str:
    """The name to open the database file at `path` by (call holding its lock: no process
    writes the file meanwhile); PsyqError when it has several names and none recorded."""
    real = os.path.realpath(path)
    try:
        found = os.stat(real)
    except OSError:  # nothing there (yet): the opener says so
        return real
    if found.st_size == 0:  # an empty file has no journal yet
        return real
    recorded = _recorded(real)
    if found.st_nlink <= 1:
        _refuse_journal_behind(path, recorded, real)
        return real
    if recorded is not None and file_identity(recorded) == (found.st_dev, found.st_ino):
        return recorded
    known = (
        f"the name psyq recorded for it, {recorded}, no longer names it"
        if recorded is not None
        else "psyq recorded none of them"
    )
    raise PsyqError(
        f"{path} is one of {found.st_nlink} names (hard links) of one database file and "
        f"{known}: SQLite keeps the file's journal beside the name it is opened by, so "
        "two names would each miss the other's changes and corrupt the file. Open it by "
        "the name it was created with, or remove the other hard links (a symlink is fine)"
    )


def _refuse_journal_behind(path: str, recorded: str | None, real: str) -> None:
    """PsyqError when the file was last opened by another name that is gone but whose
    journal is still there (moved after a crash): that journal may hold its last
    changes, which opening it by this name would never read."""
    if recorded is None or recorded == real or os.path.exists(recorded):
        return
    if not os.path.exists(f"{recorded}-wal"):
        return
    raise PsyqError(
        f"{path} was last opened as {recorded}, which is gone, but {recorded}-wal is still "
        f"there: it may hold changes of {path} not yet written into it (the file was moved "
        f"after a crash). Move the file back to {recorded} and open it there (its changes "
        f"are read then), or, if that journal is not this file's, remove {recorded}-wal and "
        f"{recorded}-shm"
    )


def _recorded(real: str) -> str | None:
    """The name recorded in the main file (read without its journal: the record is
    written through to the main file), None when there is none."""
    try:
        conn = sqlite3.connect(f"file:{quote(real)}?immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute(_RECORDED).fetchone()
    except sqlite3.Error:  # an older psyq's file, or not a psyq file: no record
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])


def record_name(conn: sqlite3.Connection, name: str) -> None:
    """Record `name` as the file's name (the owner's connection, right after opening),
    through to the main file (a checkpoint) when it changed."""
    row = conn.execute(_RECORDED).fetchone()
    if row is not None and row[0] == name:
        return
    conn.execute("INSERT OR REPLACE INTO file VALUES ('name', ?)", (name,))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def journal_left(path: str) -> str | None:
    """What is wrong when a journal lies beside `path` without its file, else None: `path`
    names no file, or an empty one (call holding the file's lock, so that no process is
    making the file meanwhile)."""
    left = [f"{path}{suffix}" for suffix in ("-wal", "-shm") if os.path.exists(path + suffix)]
    if not left:
        return None
    try:
        size: int | None = os.stat(path).st_size
    except FileNotFoundError:
        size = None
    if size:
        return None
    journal = " and ".join(left)
    if size is None:
        return (
            f"{path} does not exist, but its journal ({journal}) does: the file was moved or "
            "deleted while a process had it open, and that process may still use the "
            "journal (the file is not corrupted). Move the file back, or stop that process "
            f"and remove what is left of the journal, to open {path} again"
        )
    return (
        f"{path} is empty, but a journal ({journal}) lies beside it: the file was moved or "
        "deleted while a process had it open (the journal is that file's, and the process "
        "may still use it), or a process was killed while it made the file. Move the file "
        "back, or stop that process; once no process uses the journal and the file was "
        f"new, remove {journal}"
    )


def refuse_stale_journal(path: str) -> None:
    """PsyqError when a journal lies beside `path` without its file (`journal_left`)."""
    problem = journal_left(os.path.realpath(path))
    if problem is not None:
        raise PsyqError(problem)
