"""The active jobs' locks across a clean close of a `sqlite:///` file.

A crash leaves an active job's row without its lock: the next open loads the job with an
expired lock and the first stalled check returns it (its worker died with the process, or
cannot be told apart from one that did). A clean close (`Database.close`, after its last
flush) writes each active job's lock expiry in its row, in the `due` column, which an
active job does not use otherwise; the next open loads the lock as it was
(`resident.load_lines`). So the workers still running those jobs elsewhere (the clients
of a `psyq server` restarted with SIGTERM, a shared file's peers) renew and finish them
instead of a stalled check taking them back. The next write of such a row (the job moves
on) clears its `due` again.
"""

from __future__ import annotations

import sqlite3

from psyq.backends.engine.engine import Engine

__all__ = ["keep_locks"]

_KEEP_LOCK = "UPDATE jobs SET due = ? WHERE queue = ? AND id = ? AND state = 'active'"


def keep_locks(engine: Engine, conn: sqlite3.Connection) -> None:
    """Write the lock expiry of every active job of `engine` in its row, in one commit."""
    with engine.every_lock():
        locks = [
            (expiry, key, job_id)
            for shard in engine.shards
            for key, store in shard.stores.items()
            for job_id, (_, expiry) in store.active.items()
            if expiry
        ]
    if not locks:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(_KEEP_LOCK, locks)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
