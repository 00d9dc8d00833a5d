"""`Database`: one SQLite file holding one engine, for the whole process.

- Ownership: one process owns a file, whatever path names it (`sharing/owner.py`: an exclusive
  `flock` on the file itself); another process gets a clear error instead of a second
  writer. A file deleted or replaced while open stops every change with an error.
- Recovery: on open each queue's lines load from the file (ids in order, no bodies
  decoded), with the records of active jobs (their locks expired, so the stalled check
  returns them to waiting; after a clean close, their locks as they were: `locks.py`)
  and of parents; every other record is read when a call needs it and leaves memory again
  once written (`resident.py`: the memory model).
- Write buffer: `flush()` writes every change since the last flush in one transaction
  (`batch.py`: what a flush writes). It runs in the thread that needs it — a caller once
  `flush_changes` changes are pending, an event-loop callback for durable callers (so
  every durable call of one loop turn shares one commit), or the timer thread `flush_ms`
  after the first pending change. Flushing in the caller's thread, not a writer thread,
  keeps the two from trading the GIL per call.
- A failed flush keeps its rows and is retried by the timer thread. `close()` flushes, and
  so does a normal interpreter exit for every file still open (`lifecycle.py`: the timer
  thread is a daemon, which dies with the interpreter).
- Durability: every change gets a ticket; `flushed(ticket)` resolves once a commit holds it.
- Job ids: reserved in blocks whose mark is committed before a block's first id is handed
  out (`ids.py`), so no id is handed out twice across a crash.
- Fork: a child forked after the open refuses every call on the database it inherited and
  lets go of the parent's lock and sockets (`let_go_in_child`, called by `lifecycle.py`,
  which holds the process's open databases).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from psyq.backends.base import JobRecord
from psyq.backends.engine.engine import Engine
from psyq.backends.engine.store import QueueStore
from psyq.backends.sqlite import rows
from psyq.backends.sqlite.batch import BIND_ERRORS, Batch, merge, statements, write_all
from psyq.backends.sqlite.ids import next_block, reserve_ids
from psyq.backends.sqlite.locks import keep_locks
from psyq.backends.sqlite.names import journal_name, record_name, refuse_stale_journal
from psyq.backends.sqlite.resident import Reader, ResidentJobs, adopt, load_lines
from psyq.backends.sqlite.schema import migrate
from psyq.backends.sqlite.sharing.owner import Owner
from psyq.backends.sqlite.sharing.server import Sharer
from psyq.errors import PsyqError

__all__ = ["CACHE", "Database"]

log = logging.getLogger("psyq.sqlite")

RETRY_PAUSE_S = 0.5
CACHE = 50_000  # clean records a queue keeps in memory (resident.ResidentJobs)


class Database:
    def __init__(
        self, path: str, flush_changes: int, flush_ms: int, cache: int = CACHE, create: bool = True
    ) -> None:
        """`create`: make the file when `path` names none (a takeover does not)."""
        self.pid = os.getpid()  # the process that opened it (a forked child did not)
        self.flush_changes = flush_changes
        self.flush_ms = flush_ms
        self.engine = Engine(persistent=True)
        self.tickets = itertools.count(1)
        if not os.path.exists(path):
            refuse_stale_journal(path)  # before a file is made beside another's journal
        self.owner = Owner(path, create=create)
        try:
            refuse_stale_journal(path)  # again under the lock: no process makes it now
            self.path = journal_name(path)  # every process opens the file by this name
            self.owner.watch(self.path)
            self._conn = _connect(self.path)
            self._ids = Reader(self.path)  # reserves job ids (reserve_ids), in autocommit
            self._ids.all("PRAGMA synchronous=NORMAL", ())  # as the writer: no fsync a commit
            self.reader = Reader(self.path)
        except BaseException:
            self.owner.release()
            raise
        self.lost: PsyqError | None = None  # why changes are no longer written (Owner)
        self.write_failure: str | None = None  # why the last flush failed (None: it wrote)
        self.forked = False  # a copy in a process forked after the open (never used)
        self.engine.on_new_store = lambda store: self._adopt(store, cache)
        self.engine.on_drop = self.forget_queue
        self._versions: dict[str, int] = {}  # store key -> version last flushed
        self._metas: dict[str, str] = {}  # store key -> meta JSON last written
        self._event_seq: dict[str, int] = {}  # store key -> last event seq written
        self._cond = threading.Condition()  # guards the counters and lists below
        self._flush_lock = threading.Lock()  # one flush at a time
        self._pending = 0
        self._first_pending = 0.0
        self._flushed = 0  # every ticket below this is committed
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._scheduled: set[asyncio.AbstractEventLoop] = set()
        self._retry: Batch | None = None
        # (store key, job id) -> why its record could not be written (see _storable_row)
        self.rejected: dict[tuple[str, str], str] = {}
        self._drops: list[str] = []
        self._committed: list[Batch] = []  # committed, their evictions not yet applied
        self._closing = False
        self.sharer: Sharer | None = None  # the server of other processes (sharing/server.py)
        self._load()
        self._timer = threading.Thread(target=self._timer_loop, name=f"psyq-sqlite {self.path}")
        self._timer.daemon = True
        self._timer.start()

    # ------------------------------------------------------------------ recovery
    def _load(self) -> None:
        """Every queue's settings, lines and held jobs; other records stay in the file."""
        engine = self.engine
        metas = dict(self._conn.execute("SELECT key, meta FROM queues").fetchall())
        reserved = dict(self._conn.execute("SELECT queue, reserved FROM id_blocks").fetchall())
        for key in sorted({*metas, *reserved, *self.reader.queue_keys()}):
            store = engine.store_for_key(key)
            if key in metas:
                rows.restore_meta(store, json.loads(metas[key]))
            load_lines(store, self.reader)
            # ids up to the reserved mark may have been handed out before a crash
            store.last_id = max(store.last_id, reserved.get(key, 0))
            self._load_events(store)
            assert store.dirty is not None
            store.dirty.clear()
            self._versions[key] = store.version
            self._metas[key] = rows.queue_meta(store)
            self._event_seq[key] = store.events.last_seq

    def _load_events(self, store: QueueStore) -> None:
        (last,) = self._conn.execute(
            "SELECT COALESCE(MAX(last_seq), 0) FROM events WHERE queue = ?", (store.key,)
        ).fetchone()
        chunks = self._conn.execute(
            "SELECT first_seq, body FROM events WHERE queue = ? AND last_seq > ? "
            "ORDER BY first_seq",
            (store.key, last - store.events.max_len),
        ).fetchall()
        rows.restore_events(store, chunks, last + 1)

    def _adopt(self, store: QueueStore, cache: int) -> None:
        """A new store: its records and lines in the file, its ids reserved in blocks."""
        adopt(store, self.reader, cache)
        store.id_limit = 0  # its first new id reserves a block
        store.id_reserver = functools.partial(self.reserve_ids, store)

    # ------------------------------------------------------------------ job ids
    def reserve_ids(self, store: QueueStore, count: int) -> None:
        """Let `store` hand out `count` more ids once their mark is committed (ids.py)."""
        self.check()
        reserve_ids(self._ids, self.path, store, count)

    # ------------------------------------------------------------------ changes
    def note_change(self, jobs: int = 1) -> int:
        """A call changed `jobs` jobs (or queue settings: 1); returns its ticket."""
        ticket = next(self.tickets)
        with self._cond:
            first = not self._pending
            self._pending += jobs
            if first:  # the timer thread starts its flush_ms countdown
                self._first_pending = time.monotonic()
                self._cond.notify()
        return ticket

    @property
    def backlog(self) -> int:
        """Job changes made but not yet committed (what a crash would lose now)."""
        return self._pending

    async def flushed(self, ticket: int) -> None:
        """Return once a commit holds every change up to `ticket`."""
        self.check()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._cond:
            if ticket < self._flushed:
                return
            self._waiters.append((ticket, future))
            schedule = loop not in self._scheduled
            self._scheduled.add(loop)
        if schedule:
            loop.call_soon(self._flush_for, loop)
        await future

    def _flush_for(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._cond:
            self._scheduled.discard(loop)
        self.flush()

    # ------------------------------------------------------------------ flushing
    def flush(self) -> bool:
        """Write every change so far in one transaction; False when the write failed (its
        rows are kept for the next try)."""
        with self._flush_lock:
            if self.lost is not None:
                self._refuse_waiters()
                return False
            with self._cond:
                taken = self._pending
            batch = self._collect()
            pending = [self._retry, batch] if self._retry is not None else [batch]
            try:
                self._write_batches([b for b in pending if b])
            except sqlite3.Error as exc:
                log.exception("psyq: flushing %s failed; keeping the changes to retry", self.path)
                self._retry = merge(pending)
                self.write_failure = f"{type(exc).__name__}: {exc}"
                return False
            self._retry, self.write_failure = None, None
            self._written(pending)
            if self._file_lost():  # checked after the commit: it may have reached a lost file
                return False
            self._release(taken, batch.ticket)
            return True

    def _written(self, batches: Sequence[Batch | None]) -> None:
        """After a commit: what it wrote may leave memory, what it deleted is gone. Applied
        at the next collect, which holds every lock anyway (a second hold per flush stalled
        the callers' threads on the locks). The ids it reserved may be handed out now (a
        limit set without the store's lock: one that a call raised meanwhile may come
        back down, never past what a commit reserved)."""
        for batch in batches:
            for store, upto in batch.raised if batch is not None else ():
                if upto > store.id_limit:
                    store.id_limit = upto
        self._committed += filter(None, batches)

    def _apply_committed(self) -> None:
        """Let the stores evict what the last commits wrote (call holding every lock). A
        batch lists each store's rows together, so they go to their store in runs."""
        committed, self._committed = self._committed, []
        for batch in committed:
            for key, written in itertools.groupby(batch.upserts, itemgetter(0)):
                self._committed_in(key, written, ())
            for key, pairs in itertools.groupby(batch.deletes, itemgetter(0)):
                self._committed_in(key, (), [job_id for _, job_id in pairs])

    def _committed_in(self, key: str, written: Iterable[rows.Row], deleted: Iterable[str]) -> None:
        store = self.engine.existing_store(key)
        if store is not None:
            jobs = store.jobs
            assert isinstance(jobs, ResidentJobs)
            jobs.committed(written, deleted)

    def _timer_loop(self) -> None:
        """Flush `flush_ms` after the first pending change; retry failed flushes."""
        while True:
            with self._cond:
                while not self._closing and not self._pending and self._retry is None:
                    self._cond.wait()
                if self._closing:
                    return
                left = self._first_pending + self.flush_ms / 1000 - time.monotonic()
                if left > 0:  # close() or a flush elsewhere may end the wait early
                    self._cond.wait(left)
                    continue
            if not self.flush_reporting():
                time.sleep(RETRY_PAUSE_S)

    def flush_reporting(self) -> bool:
        """`flush()` for the timer thread, which must outlive any fault to keep flushing (and
        for the exit hook: lifecycle.py)."""
        try:
            return self.flush()
        except Exception as exc:
            log.exception("psyq: flushing %s failed; retrying", self.path)
            self.write_failure = f"{type(exc).__name__}: {exc}"
            return False

    def _collect(self) -> Batch:
        """Snapshot every change since the last flush, holding every engine lock."""
        batch = Batch()
        with self.engine.every_lock():
            if self._committed:
                self._apply_committed()
            batch.ticket = next(self.tickets)
            with self._cond:
                drops, self._drops = self._drops, []
            for key in drops:
                batch.drops.append((key,))
                for known in (self._versions, self._metas, self._event_seq):
                    known.pop(key, None)
            for shard in self.engine.shards:
                for key, store in shard.stores.items():
                    written = self._event_seq.get(key, 0)
                    if store.version != self._versions.get(key, -1) or (
                        store.events.last_seq != written
                    ):
                        self._collect_store(key, store, batch)
        return batch

    def _collect_store(self, key: str, store: QueueStore, batch: Batch) -> None:
        assert store.dirty is not None
        jobs = store.jobs
        assert isinstance(jobs, ResidentJobs)
        for job_id in store.dirty:
            record = dict.get(jobs, job_id)  # in memory, or deleted: never read back
            if record is None:
                batch.deletes.append((key, job_id))
                jobs.deleting.add(job_id)
            else:
                row = self._storable_row(store, record)
                if row is not None:
                    batch.upserts.append(row)
        store.dirty.clear()
        self._versions[key] = store.version
        meta = rows.queue_meta(store)
        if meta != self._metas.get(key):
            self._metas[key] = meta
            batch.metas.append((key, meta))
        written = self._event_seq.get(key, 0)
        if store.events.last_seq > written:
            batch.events.append(rows.event_chunk(store, written))
            self._event_seq[key] = store.events.last_seq
            batch.trims.append((key, store.events.next_seq - store.events.max_len))
        upto = next_block(store)  # this flush reserves its next block of ids
        if upto is not None:
            batch.marks.append((key, upto))
            batch.raised.append((store, upto))

    def _storable_row(self, store: QueueStore, record: JobRecord) -> rows.Row | None:
        """The job's row, or None when SQLite cannot hold it: then it is left out of the
        file (reported once per job) and every other change still commits. psyq's gate
        (psyq.core.gate) refuses such values before they reach the engine, so this is the
        last line, for a value that came another way."""
        try:
            row = rows.job_row(store, record)
            problem = rows.unstorable(row)
        except (UnicodeError, OverflowError, ValueError, TypeError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            if self.rejected:  # a job stored after all is no longer reported
                self.rejected.pop((store.key, record.id), None)
            return row
        if (store.key, record.id) not in self.rejected:
            log.error(
                "psyq: %s cannot store job %r of queue %r (%s); it is left out of the file, "
                "every other change is written",
                self.path, record.id, store.name, problem,
            )  # fmt: skip
        self.rejected[(store.key, record.id)] = problem
        return None

    def _write_batches(self, batches: list[Batch]) -> None:
        """Write the batches in one transaction; should a row fail to bind (a value SQLite
        cannot hold that `_storable_row` did not foresee), write them again row by row,
        leaving out only the rows that fail."""
        try:
            self._write(batches, write_all)
        except BIND_ERRORS as exc:
            log.error("psyq: %s: a row could not be written (%s); writing row by row",
                      self.path, exc)  # fmt: skip
            self._write(batches, self._write_each)

    def _write(self, batches: list[Batch], write: Any) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for batch in batches:
                for statement, params in statements(batch):
                    if params:  # an empty executemany still costs a statement step
                        write(conn, statement, params)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _write_each(self, conn: sqlite3.Connection, statement: str, params: Any) -> None:
        for row in params:
            try:
                conn.execute(statement, row)
            except BIND_ERRORS as exc:
                log.error("psyq: %s: left out a row of %r it cannot hold (%s): %.200r",
                          self.path, statement, exc, row)  # fmt: skip

    def _release(self, taken: int, ticket: int) -> None:
        """After a commit: count the changes done and wake the callers it covers."""
        with self._cond:
            self._pending = max(0, self._pending - taken)
            if self._pending:
                self._first_pending = time.monotonic()
            self._flushed = ticket
            done = [f for t, f in self._waiters if t < ticket]
            self._waiters = [(t, f) for t, f in self._waiters if t >= ticket]
        _wake(done, None)

    def _file_lost(self) -> bool:
        """Whether the path stopped naming the file this process writes (one `stat` per
        flush, once it committed: a commit racing a delete is never acknowledged); then
        every caller waiting for a commit gets the error, and so does every call after
        (`check`)."""
        self.lost = self.owner.check()
        if self.lost is None:
            return False
        log.error("psyq: %s", self.lost)
        self._refuse_waiters()
        return True

    def _refuse_waiters(self) -> None:
        """Every caller waiting for a commit gets the error saying the file is lost."""
        with self._cond:
            waiting, self._waiters = self._waiters, []
        _wake([future for _, future in waiting], self.lost)

    def check(self) -> None:
        """Raise when changes can no longer be written (the file was deleted or replaced)."""
        if self.lost is not None:
            raise PsyqError(str(self.lost))  # a new one: a raise adds to its traceback

    def check_storing(self) -> None:
        """Raise when changes cannot be stored now (a readiness probe's question): the path
        no longer names the file opened (one `stat`), or the last flush failed."""
        self.check()
        lost = self.owner.check()
        if lost is not None:
            raise lost
        if self.write_failure is not None:
            raise PsyqError(
                f"{self.path}: the last write failed ({self.write_failure}); the changes are "
                "kept and written again"
            )

    def hold_active(self, ms: int) -> None:
        """Give each active job loaded with an expired lock (so that the stalled check
        returns it) `ms` more instead: after a graceful handover its worker lives on in a
        peer, which extends or settles it with its token."""
        engine = self.engine
        until = engine.clock.now_ms() + ms
        with engine.every_lock():
            for shard in engine.shards:
                for store in shard.stores.values():
                    active = store.active
                    for job_id, (token, expiry) in list(active.items()):
                        if expiry == 0:  # as loaded (transfer.place)
                            active[job_id] = (token, until)

    # ------------------------------------------------------------------ lifecycle
    def let_go_in_child(self) -> None:
        """In a process forked after the open: refuse every call, naming the file and what
        to do; let go of the parent's lock and sockets (so they end with the parent, and a
        peer can take the file over then). The SQLite connections are left alone: SQLite
        forbids using one in a child, closing it included."""
        self.forked = True
        self.lost = PsyqError(
            f"{self.path} was opened before this process forked (by its parent): a forked "
            "child cannot use its parent's open database (its engine, connections and job "
            "ids are the parent's); open the Queue or Worker after the fork, in the child, "
            "and it reaches the file through its owner"
        )
        self._cond = threading.Condition()  # another thread may have held them at the fork
        self._flush_lock = threading.Lock()
        self._waiters = []
        self._closing = True
        self.owner.let_go_in_child()
        if self.sharer is not None:
            self.sharer.let_go_in_child()

    def forget_queue(self, key: str) -> None:
        """A queue's store was dropped (obliterated): its rows go at the next flush. Called
        under the store's lock, so no flush sees the store gone and its rows kept, or a new
        store of that key beside the old rows."""
        with self._cond:
            self._drops.append(key)

    def close(self) -> None:
        """Write what is pending, checkpoint the WAL and give the file up. The file is given
        up whatever fails on the way; a failure is then raised as a PsyqError. The peers
        (sharing/server.py) finish their calls first and see their connections close only once the
        file is free, so one of them takes it over at once."""
        sharer = self.sharer
        if sharer is not None:
            try:
                sharer.drain()  # first: no other process changes what is flushed last
            except Exception:  # the file is still flushed and given up
                log.exception("psyq: %s: the peers' calls did not finish", self.path)
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._timer.join()
        try:
            if self.flush():  # every id handed out is in the queues' settings now
                self._conn.execute("DELETE FROM id_blocks")
                keep_locks(self.engine, self._conn)  # for the workers still running them
            else:
                log.error("psyq: closing %s with changes that could not be written", self.path)
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise PsyqError(
                f"closing {self.path}: {exc} (the file keeps its last commit)"
            ) from None
        finally:
            self.reader.close()
            self._ids.close()
            with self._flush_lock:  # a flush begun on another thread ends first
                self._conn.close()
            self.owner.release()
            if sharer is not None:
                sharer.close()


def _wake(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    """Resolve (or fail with `error`) callers' futures, each on its own loop."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for future in futures:
        loop = future.get_loop()
        if loop is running:
            _resolve(future, error)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, future, error)


def _resolve(future: asyncio.Future[None], error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        migrate(conn, path)
        record_name(conn, path)
        conn.execute("SELECT count(*) FROM jobs").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        if os.path.exists(f"{path}-wal"):
            raise PsyqError(
                f"cannot open {path}: {exc}. If the file was moved, deleted or replaced while "
                f"a process had it open, {path}-wal is that file's journal, maybe still in "
                "use: move the file back or stop that process. Else the file is corrupted: "
                "restore it from a backup or move it away"
            ) from None
        raise PsyqError(
            f"cannot open {path} as a psyq database: {exc} (is it a psyq SQLite file? a "
            "corrupted file must be restored from a backup or moved away)"
        ) from None
    return conn
