"""`StoreState`: one queue's structures in memory, and the moves every transition shares
(placing a job in its line, finishing it, taking it out, retention).

Structures (BullMQ's keys, in Python):
- `jobs`: id -> JobRecord; `record.state` names the structure that holds the job
- `wait`: plain waiting jobs, next to take on the left (lifo jobs join on the left)
- `prio`: prioritized jobs, a 4-ary heap on (priority, sequence) with lazy deletion
- `delayed`: (due_ms, sequence, id), time-ordered
- `active`: id -> (lock token, lock expiry ms)
- `completed` / `failed`: ids in finish order (oldest first), bounded by retention
  (`FinishedLine`; a store persisted to SQLite keeps only the newest in memory)
- `waiting_children`, and per parent its pending / processed / failed / ignored children
- `logs`, `events` (the bounded event feed), `dedup`, `schedulers`, `metrics`
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sortedcontainers import SortedList

from psyq.backends.base import (
    JobRecord,
    Limiter,
)
from psyq.backends.engine.eventlog import EventLog, Extra
from psyq.backends.engine.groups import GroupLines
from psyq.backends.engine.heap import Heap4
from psyq.backends.engine.lines import FinishedLine
from psyq.backends.engine.metrics import MinuteCounts
from psyq.backends.engine.view import EngineView
from psyq.rules.retention import keep_jobs

__all__ = ["SKIP_LOCK_TOKEN", "STALLED_REASON", "CrossQueue", "Delayed", "StoreState"]

STALLED_REASON = "job stalled more than allowable limit"
SKIP_LOCK_TOKEN = "0"  # BullMQ's token that skips the lock check

Delayed = tuple[int, int, str]


NO_ID_LIMIT = 2**63 - 1


class CrossQueue(Exception):
    """This transition touches another queue: run it again holding every lock."""


class StoreState:
    """One queue's structures. Not thread-safe: the engine holds a lock around calls."""

    def __init__(self, name: str, key: str, engine: EngineView[StoreState]) -> None:
        self.name = name
        self.key = key  # "<prefix>:<name>", the start of every job key of this queue
        self.engine = engine
        self.clock = engine.clock
        self.jobs: dict[str, JobRecord] = {}
        self.wait: deque[str] = deque()
        self.prio = Heap4()
        self.groups = GroupLines()  # grouped waiting jobs, outside `wait` (groups.py)
        self.delayed: SortedList = SortedList()
        self.delayed_key: dict[str, Delayed] = {}
        self.active: dict[str, tuple[str, int]] = {}
        self.completed = FinishedLine()
        self.failed = FinishedLine()
        self.waiting_children: dict[str, None] = {}
        self.pending: dict[str, set[str]] = {}  # parent id -> child keys not yet done
        self.processed: dict[str, dict[str, str]] = {}  # parent id -> child key -> JSON
        self.failed_children: dict[str, dict[str, str]] = {}  # parent -> child -> reason
        self.ignored: dict[str, dict[str, str]] = {}
        self.logs: dict[str, list[str]] = {}
        self.events = EventLog()
        self.dedup: dict[str, tuple[str, int | None]] = {}  # dedup id -> (job id, expiry)
        self.schedulers: dict[str, dict[str, Any]] = {}
        self.metrics = {"completed": MinuteCounts(), "failed": MinuteCounts()}
        self.workers: dict[str, dict[str, Any]] = {}
        self.cancelled: dict[str, str] = {}
        self.paused = False
        self.drained = True
        self.last_id = 0  # the last job id handed out
        # Ids past `id_limit` are handed out only once `id_reserver(count)` raised it (a
        # persisted engine commits a block ahead, so no id is handed out twice across a
        # crash: sqlite/ids.py); memory:// has no limit.
        self.id_limit = NO_ID_LIMIT
        self.id_reserver: Callable[[int], None] | None = None
        self.seq = itertools.count(1)
        self.limited_until = 0
        self.window_start = 0
        self.window_count = 0
        self.global_limiter: Limiter | None = None
        self.global_concurrency: int | None = None
        self.waiters: set[asyncio.Future[None]] = set()
        # Persistence (sqlite): ids of jobs changed since the last flush, and each waiting,
        # prioritized or delayed job's rank in its line. None on memory:// (no cost).
        self.dirty: set[str] | None = None
        self.rank: dict[str, int] = {}
        self.version = 0  # counts persisted changes (jobs and queue settings)
        # Persistence (None: every record is in memory): `loader` brings records into
        # memory in one read, `peeker` reads records without keeping them, `trim` sends
        # records past the store's cache back to the file.
        self.loader: Callable[[Iterable[str], Iterable[str]], None] | None = None
        self.peeker: Callable[[Sequence[str]], dict[str, JobRecord]] | None = None
        self.trim: Callable[[], None] | None = None

    # ------------------------------------------------------------------ events
    def emit(
        self,
        event: str,
        job_id: str | None = None,
        extra: Extra = None,
        now: int | None = None,
    ) -> None:
        """Write an event to the queue's feed (see EventLog.add for `extra`)."""
        self.events.add(self.clock.now_ms() if now is None else now, event, job_id, extra)

    def reserve_ids(self, count: int) -> None:
        """Make room for `count` more ids past `last_id` (raises, changing nothing, when a
        persisted engine cannot)."""
        if self.id_reserver is None:
            self.id_limit = NO_ID_LIMIT
        else:
            self.id_reserver(count)

    def mark(self, job_id: str) -> None:
        """Note a changed job for the next flush (persistent stores only)."""
        if self.dirty is not None:
            self.dirty.add(job_id)
            self.version += 1

    def preload(self, ids: Iterable[str]) -> None:
        """Bring the records of `ids` into memory in one read, before a loop touches each
        (a store persisted to SQLite keeps some only in the file)."""
        if self.loader is not None:
            self.loader(ids, ())

    def peek(self, ids: Sequence[str]) -> list[JobRecord]:
        """The records of those `ids` that exist, in order, for a read: a record only in
        the file is read without being kept in memory."""
        if self.peeker is None:
            jobs = self.jobs
            return [jobs[job_id] for job_id in ids if job_id in jobs]
        found = self.peeker(ids)
        return [found[job_id] for job_id in ids if job_id in found]

    def changed(self) -> None:
        """Note a change of queue settings (paused, limits, schedulers, dedup keys)."""
        self.version += 1

    def job_key(self, job_id: str) -> str:
        return f"{self.key}:{job_id}"

    # ------------------------------------------------------------------ placing jobs
    def _enqueue(self, record: JobRecord, lifo: bool = False, front: bool = False) -> None:
        """Make a job ready: in its group's line, prioritized by priority, else plain
        waiting."""
        group = record.opts.get("group") if record.opts else None
        if group is not None:
            self.groups.push(group["id"], record.id, group.get("priority", 0), front)
            record.state = "waiting"
            if self.dirty is not None:
                self.dirty.add(record.id)
                self.rank[record.id] = -next(self.seq) if front else next(self.seq)
                self.version += 1
            return
        if record.priority > 0:
            seq = next(self.seq)
            rank = -seq if lifo or front else seq
            self.prio.push(record.priority, rank, record.id)
            record.state = "prioritized"
        else:
            if lifo or front:
                self.wait.appendleft(record.id)
            else:
                self.wait.append(record.id)
            record.state = "waiting"
            if self.dirty is None:
                return
            rank = -next(self.seq) if lifo or front else next(self.seq)
        if self.dirty is not None:
            self.dirty.add(record.id)
            self.rank[record.id] = rank
            self.version += 1

    def _delay(self, record: JobRecord, due: int) -> None:
        key = (due, next(self.seq), record.id)
        self.delayed.add(key)
        self.delayed_key[record.id] = key
        record.state = "delayed"
        self.mark(record.id)
        self.emit("delayed", record.id, {"delay": due})

    def to_wait(self, record: JobRecord, prev: str) -> None:
        """A detached job becomes ready (or delayed, if it still has a delay to serve)."""
        self._enqueue(record, record.opts.get("lifo", False))
        self.emit("waiting", record.id, {"prev": prev})

    def _finish_into(self, record: JobRecord, state: str, now: int, default: Any = None) -> None:
        """`default`: the worker's removeOnComplete/removeOnFail, for a job without its own."""
        target = self.completed if state == "completed" else self.failed
        record.state = state
        target.ids[record.id] = None  # FinishedLine.add, without a call on the hot path
        if self.dirty is not None:  # its place in the finished line, kept in the file
            self.rank[record.id] = next(self.seq)
        self.metrics[state].record(now)
        opts = record.opts
        if opts:
            self.release_dedup(record)
            keep = opts.get("removeOnComplete" if state == "completed" else "removeOnFail", default)
        else:
            keep = default
        if keep is not None and keep is not False:
            self._retain(record, target, keep, now)

    def _fail(
        self, record: JobRecord, reason: str, stacktrace: Sequence[str], now: int, keep: Any = None
    ) -> None:
        record.failed_reason = reason
        record.stacktrace = stacktrace
        self._finish_into(record, "failed", now, keep)
        self.emit("failed", record.id, {"failedReason": reason, "prev": "active"})
        if record.attempts_made >= record.opts.get("attempts", 1):
            self.emit("retries-exhausted", record.id, {"attemptsMade": record.attempts_made})

    def _detach(self, record: JobRecord) -> None:
        """Take a job out of the structure of its state (it stays in `jobs`)."""
        job_id, state = record.id, record.state
        if self.dirty is not None:
            self.dirty.add(job_id)
            self.rank.pop(job_id, None)
            self.version += 1
        if state == "waiting":
            self._leave_wait(record)
        elif state == "prioritized":
            self.prio.discard(job_id)
        elif state == "delayed":
            self.delayed.remove(self.delayed_key.pop(job_id))
        elif state == "active":
            self._leave_active(record)
        elif state == "completed":
            self.completed.remove(job_id)
        elif state == "failed":
            self.failed.remove(job_id)
        elif state == "waiting-children":
            del self.waiting_children[job_id]
        record.state = None

    def _leave_wait(self, record: JobRecord) -> None:
        group = record.opts.get("group") if record.opts else None
        if group is None:
            self.wait.remove(record.id)
        else:
            self.groups.discard(group["id"], record.id)

    def _leave_active(self, record: JobRecord) -> None:
        del self.active[record.id]
        if self.cancelled:
            self.cancelled.pop(record.id, None)
        record.lock_token = None
        if record.opts and "group" in record.opts:  # its group's slot frees
            self.groups.released(record.opts["group"]["id"], self.clock.now_ms())

    def _drop(self, record: JobRecord) -> None:
        self._detach(record)
        job_id = record.id
        del self.jobs[job_id]
        self.logs.pop(job_id, None)
        for links in (self.pending, self.processed, self.failed_children, self.ignored):
            links.pop(job_id, None)
        self.release_dedup(record)

    def _retain(self, record: JobRecord, target: FinishedLine, keep: Any, now: int) -> None:
        """Apply a finished job's retention to its line (`record`: the job that finished)."""
        if keep is True:
            self._drop(record)
            return
        if isinstance(keep, int):
            self._keep_newest(target, keep)
            return
        policy = keep_jobs(keep)
        if policy.count is not None:
            self._keep_newest(target, policy.count)
        if policy.age_ms is not None:
            self._drop_older(target, now - policy.age_ms, policy.limit or 1000)

    def _keep_newest(self, target: FinishedLine, count: int) -> None:
        while len(target) > count and self._drop_id(target.oldest()):
            pass

    def _drop_id(self, job_id: str | None) -> bool:
        if job_id is None:
            return False
        self._drop(self.jobs[job_id])
        return True

    def _drop_older(self, target: FinishedLine, cutoff: int, limit: int) -> None:
        while limit > 0:
            job_id = target.oldest()
            if job_id is None:
                return
            record = self.jobs[job_id]
            if (record.finished_on or 0) >= cutoff:
                return
            self._drop(record)
            limit -= 1

    def release_dedup(self, record: JobRecord) -> None:
        """A job without a dedup ttl frees its key when it finishes or goes away."""
        dedup = record.opts.get("deduplication")
        if dedup is None:
            return
        entry = self.dedup.get(dedup["id"])
        if entry is not None and entry[0] == record.id and entry[1] is None:
            del self.dedup[dedup["id"]]
