"""What of a queue persisted to SQLite lives in memory, and what only in the file.

Memory holds every line in order (ids only: the wait deque, the priority heap, the delayed
set), the records of active jobs, of jobs waiting for children and of changes not yet
written, and a bounded cache of other records. Everything else is served from the file:

- `ResidentJobs` is such a store's `jobs`: a dict of the records in memory whose misses
  read the file (one row by primary key; `preload` reads many in one statement). A record
  leaves memory only after a commit wrote it and while nothing changed it since, so the
  file's row is the record; a job deleted here whose deletion is not committed yet is
  never read back.
- `FileLine` is a finished line (completed or failed): the newest ids in memory, the rest
  counted and listed from the file's `jobs_finished` index, merged by rank (finish order).
- `Reader` is the second connection those reads use; in WAL mode it sees the last commit.
- `load_lines` fills a store's lines when a file opens, in one pass over the queue's rows:
  ids in order, no bodies, except for active jobs (the stalled check needs them: their
  locks expired, or as a clean close kept them) and parents.
"""

from __future__ import annotations

import heapq
import itertools
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sortedcontainers import SortedList

from psyq.backends.base import JobRecord
from psyq.backends.engine import transfer
from psyq.backends.engine.lines import FinishedLine
from psyq.backends.engine.store import QueueStore
from psyq.backends.sqlite import rows

__all__ = ["FileLine", "Reader", "ResidentJobs", "adopt", "load_lines"]

LINES = ("waiting", "prioritized", "delayed")
FINISHED = ("completed", "failed")
PAGE = 500  # rows per read of a line or of many records
FIRST_PAGE = 8  # rows of a line's first read
AHEAD = 100  # records a take reads beyond its own once it must read the file
_LOWEST, _HIGHEST = -(2**63), 2**63 - 1

_ROWS = f"SELECT {rows.JOB_COLUMNS} FROM jobs WHERE queue = ? AND id IN (SELECT value FROM json_each(?))"  # noqa: E501
# A finished line's queries name the `jobs_finished` index's condition, so SQLite uses it.
_FINISHED = "state IN ('completed', 'failed')"
_PAGE_UP = (
    f"SELECT rank, id FROM jobs WHERE queue = ? AND state = ? AND {_FINISHED} AND rank > ? "
    "ORDER BY rank LIMIT ?"
)
_PAGE_DOWN = (
    f"SELECT rank, id FROM jobs WHERE queue = ? AND state = ? AND {_FINISHED} AND rank < ? "
    "ORDER BY rank DESC LIMIT ?"
)
_COUNT = f"SELECT count(*), max(rank) FROM jobs WHERE queue = ? AND state = ? AND {_FINISHED}"
# A line at open, as one JSON array (a million ids decode in C, not as a million row
# tuples), with the largest rank in use; an aggregate reads its ordered subquery in order
# (SQLite never flattens it). Lines have no index: each reads the queue's rows once.
_WAITING = (
    "SELECT json_group_array(id), max(abs(rank)) FROM "
    "(SELECT id, rank FROM jobs WHERE queue = ? AND state = 'waiting' AND grp IS NULL "
    "ORDER BY rank)"
)
_GROUPED = (
    "SELECT json_group_array(json_array(grp, priority, id)), max(abs(rank)) FROM "
    "(SELECT grp, priority, id, rank FROM jobs WHERE queue = ? AND state = 'waiting' "
    "AND grp IS NOT NULL ORDER BY rank)"
)
_PRIORITIZED = (
    "SELECT json_group_array(json_array(priority, coalesce(rank, 0), id)), max(abs(rank)) "
    "FROM jobs WHERE queue = ? AND state = 'prioritized'"
)
_DELAYED = (
    "SELECT json_group_array(json_array(coalesce(due, 0), coalesce(rank, 0), id)), "
    "max(abs(rank)) FROM jobs WHERE queue = ? AND state = 'delayed'"
)
_HELD = (
    f"SELECT {rows.JOB_COLUMNS} FROM jobs "
    "WHERE queue = ? AND state IN ('active', 'waiting-children')"
)


class Reader:
    """The file, read for records and lines memory does not hold (its own connection, so a
    read never waits for a flush's transaction and never sees one half-written)."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.lock = threading.Lock()  # one statement at a time on this connection

    def close(self) -> None:
        """After the statement under way on another thread, if any: closing a connection
        under a running statement crashes the interpreter (a NULL handle in sqlite3)."""
        with self.lock:
            self.conn.close()

    def all(self, statement: str, params: Sequence[Any]) -> list[Any]:
        with self.lock:
            return self.conn.execute(statement, params).fetchall()

    def one(self, statement: str, params: Sequence[Any]) -> Any:
        with self.lock:
            row = self.conn.execute(statement, params).fetchone()
        return None if row is None else row[0]

    def records(self, key: str, ids: Sequence[str]) -> list[Any]:
        """The job rows (`rows.JOB_COLUMNS`) of `ids` that the file holds."""
        found: list[Any] = []
        for start in range(0, len(ids), PAGE):
            found += self.all(_ROWS, (key, json.dumps(ids[start : start + PAGE])))
        return found

    def line_page(
        self, key: str, state: str, asc: bool, after: int | None, limit: int
    ) -> list[Any]:
        """Up to `limit` (rank, id) of a line after rank `after` (None: from its start)."""
        if asc:
            return self.all(_PAGE_UP, (key, state, _LOWEST if after is None else after, limit))
        return self.all(_PAGE_DOWN, (key, state, _HIGHEST if after is None else after, limit))

    def queue_keys(self) -> list[str]:
        with self.lock:
            return rows.queue_keys(self.conn)


class ResidentJobs(dict[str, JobRecord]):
    """A persisted store's records in memory; a miss reads the file (module docstring).

    Finished records leave once a commit has written them (and those a read brought back,
    at the next flush). `bound`: line records (waiting, prioritized, delayed) kept beyond those
    memory needs; past it they leave after each commit, newest written first (the farthest
    from being taken, in a FIFO line)."""

    def __init__(self, store: QueueStore, reader: Reader, bound: int) -> None:
        super().__init__()
        self.store = store
        self.reader = reader
        self.bound = bound
        self.in_file = False  # whether the file may hold records memory does not
        self.deleting: set[str] = set()  # deleted here; the deletion is not committed yet
        # Ids of clean records (some since changed or gone: checked when they leave): line
        # records newest last, and finished records read back from the file.
        self.lines_clean: list[str] = []
        self.finished_read: list[str] = []

    # ------------------------------------------------------------------ reads
    def __missing__(self, job_id: str) -> JobRecord:
        record = self._read(job_id)
        if record is None:
            raise KeyError(job_id)
        return record

    def get(self, job_id: str, default: Any = None) -> Any:
        record = dict.get(self, job_id)
        if record is None and self.in_file:
            record = self._read(job_id)
        return default if record is None else record

    def __contains__(self, job_id: object) -> bool:
        if dict.__contains__(self, job_id):
            return True
        return self.in_file and isinstance(job_id, str) and self._read(job_id) is not None

    def gone(self, job_id: str) -> bool:
        """Deleted in memory while the file may still hold its row."""
        dirty = self.store.dirty
        return (dirty is not None and job_id in dirty) or job_id in self.deleting

    def _read(self, job_id: str) -> JobRecord | None:
        if not isinstance(job_id, str) or self.gone(job_id):
            return None
        found = self.reader.records(self.store.key, [job_id])
        return self.admit(found[0]) if found else None

    def preload(self, ids: Iterable[str], ahead: Iterable[str] = ()) -> None:
        """Read the records of `ids` memory lacks, in one statement per PAGE; when one is
        read, those of the first AHEAD of `ahead` (the line a take continues) come along."""
        if not self.in_file:
            return
        has = dict.__contains__
        missing = [job_id for job_id in ids if not has(self, job_id) and not self.gone(job_id)]
        if missing:
            upcoming = itertools.islice(ahead, AHEAD)
            missing += [job_id for job_id in upcoming if not has(self, job_id)]
            for row in self.reader.records(self.store.key, missing):
                self.admit(row)

    def peek(self, ids: Sequence[str]) -> dict[str, JobRecord]:
        """The records of `ids` that exist, those only in the file read but not kept."""
        found: dict[str, JobRecord] = {}
        missing: list[str] = []
        for job_id in ids:
            record = dict.get(self, job_id)
            if record is not None:
                found[job_id] = record
            elif self.in_file and not self.gone(job_id):
                missing.append(job_id)
        name = self.store.name
        for row in self.reader.records(self.store.key, missing) if missing else ():
            found[row[1]] = rows.job_record(name, row)
        return found

    def admit(self, row: Sequence[Any]) -> JobRecord:
        """Bring a job row into memory: its record, rank, children links and logs."""
        store = self.store
        record = rows.job_record(store.name, row)
        job_id, state, rank, deps, logs = row[1], row[2], row[3], row[7], row[8]
        dict.__setitem__(self, job_id, record)
        if rank is not None and state in transfer.RANKED:
            store.rank[job_id] = rank
        if deps is not None:
            transfer.restore_links(store, job_id, json.loads(deps))
        if logs is not None:
            store.logs[job_id] = json.loads(logs)
        self.written(job_id, state)  # clean: it may leave again
        return record

    # ------------------------------------------------------------------ eviction
    def committed(self, written: Iterable[Sequence[Any]], deleted: Iterable[str]) -> None:
        """A commit wrote these job rows and deleted these ids (called at the next flush,
        with every lock held): finished records leave memory, line records past the bound
        too."""
        finished: list[str] = []
        clean = self.lines_clean if self._tracking() else None
        for row in written:
            state = row[2]
            if state in FINISHED:
                finished.append(row[1])
            elif clean is not None and state in LINES:
                clean.append(row[1])
        if finished:
            self._forget_finished(finished)
        self.deleting.difference_update(deleted)
        self.evict()

    def _forget_finished(self, ids: list[str]) -> None:
        """Drop the records of these finished jobs, but those changed since their commit."""
        store = self.store
        dirty, rank, get = store.dirty, store.rank, super().get
        completed, failed = store.completed, store.failed
        assert dirty is not None and isinstance(completed, FileLine)
        assert isinstance(failed, FileLine)
        lines: dict[str | None, FileLine] = {"completed": completed, "failed": failed}
        linked = store.logs or store.pending or store.processed or store.failed_children
        linked = linked or store.ignored
        for job_id in ids:
            record = get(job_id)
            line = None if record is None or job_id in dirty else lines.get(record.state)
            if line is not None:
                del self[job_id]
                rank.pop(job_id, None)
                if linked:
                    self._unlink(job_id)
                line.evicted(job_id)
        self.in_file = True

    def written(self, job_id: str, state: str) -> None:
        """A read brought this job's row into memory as of `state`: it may leave again."""
        if state in FINISHED:
            self.finished_read.append(job_id)
        elif state in LINES and self._tracking():
            self.lines_clean.append(job_id)

    def _tracking(self) -> bool:
        """Whether clean line records are listed to leave. Below half the bound they are
        not (nothing leaves there, and listing every job a busy queue writes costs it
        speed); eviction can then leave up to half the bound of them in memory for good,
        which keeps memory within the bound all the same."""
        return len(self) >= self.bound // 2

    def evict(self) -> None:
        """Send clean records back to the file (call with the lock held): finished ones read
        back since the last commit, and line records past the bound."""
        if self.finished_read:
            read, self.finished_read = self.finished_read, []
            self._forget_finished(read)
        clean = self.lines_clean
        excess = len(self) - self.bound
        while excess > 0 and clean:
            excess -= self._evict_line(clean.pop())
        if len(clean) > 2 * len(self) + PAGE:  # mostly ids taken or gone since: tidy up
            self.lines_clean = list(dict.fromkeys(i for i in clean if self._clean_line(i)))

    def _clean_line(self, job_id: str) -> bool:
        """Whether the job's record is in memory, in a line, and as its last commit wrote it."""
        record = super().get(job_id)
        dirty = self.store.dirty
        return (
            record is not None
            and record.state in LINES
            and not (dirty is not None and job_id in dirty)
        )

    def _evict_line(self, job_id: str) -> bool:
        if not self._clean_line(job_id):
            return False  # gone, moved on, or changed since the commit
        del self[job_id]
        self.store.rank.pop(job_id, None)
        self._unlink(job_id)
        self.in_file = True
        return True

    def _unlink(self, job_id: str) -> None:
        """Forget what memory held beside a record that left: its logs and children."""
        store = self.store
        store.logs.pop(job_id, None)
        for links in (store.pending, store.processed, store.failed_children, store.ignored):
            links.pop(job_id, None)


class FileLine(FinishedLine):
    """A finished line whose older ids are only in the file (`in_file` counts them)."""

    __slots__ = ("in_file", "jobs", "state")

    def __init__(self, state: str, jobs: ResidentJobs) -> None:
        super().__init__()
        self.state = state
        self.jobs = jobs
        self.in_file = 0

    def __len__(self) -> int:
        return len(self.ids) + self.in_file

    def remove(self, job_id: str) -> None:
        if job_id in self.ids:
            del self.ids[job_id]
        else:  # it was counted in the file, read back to be moved
            self.in_file -= 1

    def evicted(self, job_id: str) -> None:
        """The job's record left memory; its id is now listed from the file."""
        if job_id in self.ids:
            del self.ids[job_id]
            self.in_file += 1

    def iterate(self, asc: bool) -> Iterator[str]:
        return self._merged(asc, list(self.ids))  # a snapshot: callers change the line

    def oldest(self) -> str | None:
        return next(self._merged(True, self.ids), None)  # read before any change

    def _merged(self, asc: bool, ids: Iterable[str]) -> Iterator[str]:
        """Memory's ids (added in rank order) and the file's, merged by rank."""
        rank = self.jobs.store.rank
        ordered = ids if asc else reversed(list(ids))
        memory = ((rank.get(job_id, 0), job_id) for job_id in ordered)
        merged = heapq.merge(memory, self._from_file(asc), reverse=not asc)
        return (job_id for _, job_id in merged)

    def _from_file(self, asc: bool) -> Iterator[tuple[int, str]]:
        """The file's (rank, id) of this line that memory does not speak for, page by page
        (each page starts after the last rank read, so the line may change meanwhile)."""
        after, limit = None, FIRST_PAGE  # retention often wants only the oldest
        while self.in_file:
            page = self.jobs.reader.line_page(self.jobs.store.key, self.state, asc, after, limit)
            for rank, job_id in page:
                if self._listed(job_id):
                    yield rank, job_id
            if len(page) < limit:
                return
            after, limit = page[-1][0], PAGE

    def _listed(self, job_id: str) -> bool:
        """Whether the file's row of `job_id` (in this line) still stands for the job."""
        jobs = self.jobs
        record = dict.get(jobs, job_id)
        if record is None:
            return not jobs.gone(job_id)
        return job_id not in self.ids and record.state == self.state


def adopt(store: QueueStore, reader: Reader, bound: int) -> ResidentJobs:
    """Give a new store of a persisted engine its file-backed records and lines."""
    jobs = ResidentJobs(store, reader, bound)
    store.jobs = jobs
    store.completed = FileLine("completed", jobs)
    store.failed = FileLine("failed", jobs)
    store.loader = jobs.preload
    store.peeker = jobs.peek
    store.trim = jobs.evict
    return jobs


def load_lines(store: QueueStore, reader: Reader) -> None:
    """Fill a store's lines from the file (when it opens): ids in order, no job bodies."""
    key, jobs = store.key, store.jobs
    assert isinstance(jobs, ResidentJobs)
    ids, top = reader.all(_WAITING, (key,))[0]
    store.wait.extend(json.loads(ids))
    tops = [top or 0]
    entries, top = reader.all(_GROUPED, (key,))[0]
    for gid, priority, job_id in json.loads(entries):
        store.groups.push(gid, job_id, priority, front=False)
    tops.append(top or 0)
    entries, top = reader.all(_PRIORITIZED, (key,))[0]
    for priority, rank, job_id in json.loads(entries):
        store.prio.push(priority, rank, job_id)
    tops.append(top or 0)
    entries, top = reader.all(_DELAYED, (key,))[0]
    delayed = [tuple(entry) for entry in json.loads(entries)]
    store.delayed = SortedList(delayed)
    store.delayed_key = {entry[2]: entry for entry in delayed}
    tops.append(top or 0)
    for row in reader.all(_HELD, (key,)):
        record = jobs.admit(row)
        transfer.place(store, record, row[3] or 0, row[4])
        if record.state == "active" and row[4]:  # its lock's expiry, kept by a clean close
            store.active[record.id] = (store.active[record.id][0], row[4])
    for line in (store.completed, store.failed):
        assert isinstance(line, FileLine)
        line.in_file, top = reader.all(_COUNT, (key, line.state))[0]
        tops.append(top or 0)
    jobs.in_file = True
    store.seq = itertools.count(max(tops) + 1)  # new ranks continue above every rank in use
