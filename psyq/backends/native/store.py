"""`QueueStore`: every job of one queue in memory, and each state transition as one method.

Methods are synchronous and run under the owning shard's lock, so each one is atomic. A
transition that reaches into another queue (a child finishing updates its parent) raises
`CrossQueue` before changing anything unless the engine holds every lock; the backend then
runs it again with all locks (see `flows.py`).

Structures (BullMQ's keys, in Python):
- `jobs`: id -> JobRecord; `record.state` names the structure that holds the job
- `wait`: plain waiting jobs, next to take on the left (lifo jobs join on the left)
- `prio`: prioritized jobs, a 4-ary heap on (priority, sequence) with lazy deletion
- `delayed`: (due_ms, sequence, id), time-ordered
- `active`: id -> (lock token, lock expiry ms)
- `completed` / `failed`: ids in finish order (oldest first), bounded by retention
- `waiting_children`, and per parent its pending / processed / failed / ignored children
- `logs`, `events` (the bounded event feed), `dedup`, `schedulers`, `metrics`
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence, Sized
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedList

from psyq.backends.base import (
    Completed,
    Failed,
    FetchRequest,
    JobRecord,
    Limiter,
    NewJob,
    Retry,
    StalledResult,
)
from psyq.backends.native import flows, schedulers
from psyq.backends.native.eventlog import EventLog, Extra
from psyq.backends.native.heap import Heap4
from psyq.backends.native.metrics import MinuteCounts
from psyq.core.options import keep_jobs
from psyq.errors import JobNotFoundError, JobStateError, LockError, PsyqError

if TYPE_CHECKING:
    from psyq.backends.native.engine import Engine

__all__ = ["STALLED_REASON", "CrossQueue", "QueueStore"]

STALLED_REASON = "job stalled more than allowable limit"
SKIP_LOCK_TOKEN = "0"  # BullMQ's token that skips the lock check

Delayed = tuple[int, int, str]


class CrossQueue(Exception):
    """This transition touches another queue: run it again holding every lock."""


class QueueStore:
    """One queue's jobs and state. Not thread-safe: the engine holds a lock around calls."""

    def __init__(self, name: str, key: str, engine: Engine) -> None:
        self.name = name
        self.key = key  # "<prefix>:<name>", the start of every job key of this queue
        self.engine = engine
        self.clock = engine.clock
        self.jobs: dict[str, JobRecord] = {}
        self.wait: deque[str] = deque()
        self.prio = Heap4()
        self.delayed: SortedList = SortedList()
        self.delayed_key: dict[str, Delayed] = {}
        self.active: dict[str, tuple[str, int]] = {}
        self.completed: OrderedDict[str, None] = OrderedDict()
        self.failed: OrderedDict[str, None] = OrderedDict()
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
        self.last_id = 0
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

    def mark(self, job_id: str) -> None:
        """Note a changed job for the next flush (persistent stores only)."""
        if self.dirty is not None:
            self.dirty.add(job_id)
            self.version += 1

    def changed(self) -> None:
        """Note a change of queue settings (paused, limits, schedulers, dedup keys)."""
        self.version += 1

    def job_key(self, job_id: str) -> str:
        return f"{self.key}:{job_id}"

    # ------------------------------------------------------------------ adding
    def add_jobs(self, jobs: Sequence[NewJob], now: int) -> list[JobRecord]:
        children = [new for new in jobs if new.opts and "parent" in new.opts]
        if children:
            if not self.engine.all_locked:
                raise CrossQueue
            for new in children:
                flows.check_parent(self, new.opts["parent"])
        return [self.add(new, now) for new in jobs]

    def add(self, new: NewJob, now: int, hold: bool = False) -> JobRecord:
        """Add a job (`hold`: it waits for children it is about to get)."""
        opts = new.opts
        timestamp = now if new.timestamp is None else new.timestamp
        if not opts and not hold:  # the common case: a plain job
            self.last_id += 1
            job_id = str(self.last_id)
            record = JobRecord(job_id, self.name, new.name, new.data, opts, timestamp)
            self.jobs[job_id] = record
            self.wait.append(job_id)
            record.state = "waiting"
            if self.dirty is not None:
                self.dirty.add(job_id)
                self.rank[job_id] = next(self.seq)
                self.version += 1
            self.emit("added", job_id, new.name, now)
            self.emit("waiting", job_id, None, now)
            return record
        custom = opts.get("jobId")
        if custom is not None and custom in self.jobs:
            self.emit("duplicated", custom)
            return self.jobs[custom]
        dedup = opts.get("deduplication")
        if dedup is not None:
            existing = self._deduplicated(dedup, now, custom)
            if existing is not None:
                return existing
        if custom is None:
            self.last_id += 1
            job_id = str(self.last_id)
        else:
            job_id = custom
        parent = opts.get("parent")
        record = JobRecord(
            job_id,
            self.name,
            new.name,
            new.data,
            opts,
            timestamp,
            opts.get("delay", 0),
            opts.get("priority", 0),
            parent_key=None if parent is None else f"{parent['queue']}:{parent['id']}",
        )
        self.jobs[job_id] = record
        self.mark(job_id)
        if dedup is not None:
            ttl = dedup.get("ttl")
            self.dedup[dedup["id"]] = (job_id, None if ttl is None else now + ttl)
        self.emit("added", job_id, new.name, now)
        if "parent" in opts:
            flows.link_child(self, record)
        if hold:
            self.hold(record)
        else:
            self._place_new(record)
        return record

    def hold(self, record: JobRecord) -> None:
        self.mark(record.id)
        record.state = "waiting-children"
        self.waiting_children[record.id] = None
        self.pending.setdefault(record.id, set())
        self.emit("waiting-children", record.id)

    def move_to_waiting_children(self, job_id: str, token: str) -> bool:
        record = self.locked(job_id, token, "move to waiting-children")
        if not self.pending.get(job_id):
            return False
        self._detach(record)
        self.hold(record)
        return True

    def _place_new(self, record: JobRecord) -> None:
        if record.delay > 0:
            self._delay(record, record.timestamp + record.delay)
        else:
            self._enqueue(record, record.opts.get("lifo", False))
            self.emit("waiting", record.id)

    def _deduplicated(
        self, dedup: dict[str, Any], now: int, opts_job_id: str | None
    ) -> JobRecord | None:
        """The job that makes this add a duplicate, or None (after a debounce replace)."""
        entry = self.dedup.get(dedup["id"])
        if entry is None:
            return None
        job_id, expiry = entry
        record = self.jobs.get(job_id)
        if record is None or (expiry is not None and expiry <= now):
            del self.dedup[dedup["id"]]
            return None
        if dedup.get("replace") and record.state == "delayed":
            self._drop(record)
            self.emit("removed", job_id, {"prev": "delayed"})
            return None
        if dedup.get("extend") and expiry is not None:
            self.dedup[dedup["id"]] = (job_id, now + dedup["ttl"])
        self.emit(
            "deduplicated",
            job_id,
            {"deduplicationId": dedup["id"], "deduplicatedJobId": str(opts_job_id or "")},
        )
        return record

    def release_dedup(self, record: JobRecord) -> None:
        """A job without a dedup ttl frees its key when it finishes or goes away."""
        dedup = record.opts.get("deduplication")
        if dedup is None:
            return
        entry = self.dedup.get(dedup["id"])
        if entry is not None and entry[0] == record.id and entry[1] is None:
            del self.dedup[dedup["id"]]

    # ------------------------------------------------------------------ placing jobs
    def _enqueue(self, record: JobRecord, lifo: bool = False, front: bool = False) -> None:
        """Make a job ready: prioritized by priority, else plain waiting."""
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

    def _finish_into(self, record: JobRecord, state: str, now: int) -> None:
        target = self.completed if state == "completed" else self.failed
        record.state = state
        target[record.id] = None
        self.metrics[state].record(now)
        opts = record.opts
        if not opts:
            return
        self.release_dedup(record)
        keep = opts.get("removeOnComplete" if state == "completed" else "removeOnFail")
        if keep is not None and keep is not False:
            self._retain(target, keep, now)

    def _detach(self, record: JobRecord) -> None:
        """Take a job out of the structure of its state (it stays in `jobs`)."""
        job_id, state = record.id, record.state
        if self.dirty is not None:
            self.dirty.add(job_id)
            self.rank.pop(job_id, None)
            self.version += 1
        if state == "waiting":
            self.wait.remove(job_id)
        elif state == "prioritized":
            self.prio.discard(job_id)
        elif state == "delayed":
            self.delayed.remove(self.delayed_key.pop(job_id))
        elif state == "active":
            del self.active[job_id]
            if self.cancelled:
                self.cancelled.pop(job_id, None)
            record.lock_token = None
        elif state == "completed":
            del self.completed[job_id]
        elif state == "failed":
            del self.failed[job_id]
        elif state == "waiting-children":
            del self.waiting_children[job_id]
        record.state = None

    def _drop(self, record: JobRecord) -> None:
        self._detach(record)
        job_id = record.id
        del self.jobs[job_id]
        self.logs.pop(job_id, None)
        for links in (self.pending, self.processed, self.failed_children, self.ignored):
            links.pop(job_id, None)
        self.release_dedup(record)

    def _retain(self, target: OrderedDict[str, None], keep: Any, now: int) -> None:
        if keep is True:
            self._drop(self.jobs[next(reversed(target))])
            return
        if isinstance(keep, int):
            while len(target) > keep:
                self._drop(self.jobs[next(iter(target))])
            return
        policy = keep_jobs(keep)
        if policy.count is not None:
            while len(target) > policy.count:
                self._drop(self.jobs[next(iter(target))])
        if policy.age_ms is not None:
            self._drop_older(target, now - policy.age_ms, policy.limit or 1000)

    def _drop_older(self, target: OrderedDict[str, None], cutoff: int, limit: int) -> None:
        while target and limit > 0:
            record = self.jobs[next(iter(target))]
            if (record.finished_on or 0) >= cutoff:
                return
            self._drop(record)
            limit -= 1

    # ------------------------------------------------------------------ fetching
    def ready_in(self, now: int) -> int | None:
        """0 when a fetch could take a job now; ms until one may be ready; None: unknown."""
        if self.paused:
            return None
        if self.limited_until > now:
            return self.limited_until - now
        if self.global_concurrency is not None and len(self.active) >= self.global_concurrency:
            return None
        if self.wait or self.prio:
            return 0
        if self.delayed:
            due: int = self.delayed[0][0]
            return max(0, due - now)
        return None

    def promote_due(self, now: int) -> None:
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            _, _, job_id = delayed.pop(0)
            del self.delayed_key[job_id]
            record = self.jobs[job_id]
            record.delay = 0
            record.state = None
            self.to_wait(record, "delayed")

    def take(self, request: FetchRequest, now: int) -> list[JobRecord]:
        """Lock and return up to len(request.tokens) ready jobs."""
        if self.delayed:
            self.promote_due(now)
        if self.paused:
            return []
        free = (
            request.limiter is None
            and self.global_limiter is None
            and self.global_concurrency is None
            and self.limited_until <= now
        )
        wanted = (
            len(request.tokens)
            if free
            else self._allowed(len(request.tokens), request.limiter, now)
        )
        taken: list[JobRecord] = []
        wait, prio, jobs, active = self.wait, self.prio, self.jobs, self.active
        expiry = now + request.lock_duration
        for token in request.tokens[:wanted]:
            if wait:
                job_id = wait.popleft()
            else:
                job_id = prio.pop()  # type: ignore[assignment]
                if job_id is None:
                    break
            record = jobs[job_id]
            record.state = "active"
            record.lock_token = token
            record.processed_on = now
            record.attempts_started += 1
            record.processed_by = request.worker_name
            active[job_id] = (token, expiry)
            if self.dirty is not None:
                self.dirty.add(job_id)
                self.rank.pop(job_id, None)
                self.version += 1
            self.emit("active", job_id, None, now)
            if "repeatJobKey" in record.opts:
                self.schedule_next(record, now)
            taken.append(record)
        if taken:
            self.window_count += len(taken)
            self.drained = False
        elif not self.drained and not self.wait and not self.prio:
            self.drained = True
            self.emit("drained", None, None, now)
        return taken

    def _allowed(self, wanted: int, limiter: Limiter | None, now: int) -> int:
        if self.limited_until > now:
            return 0
        if self.global_concurrency is not None:
            wanted = min(wanted, self.global_concurrency - len(self.active))
        limiter = self.global_limiter or limiter
        if limiter is None:
            return wanted
        if now >= self.window_start + limiter.duration:
            self.window_start, self.window_count = now, 0
        left = limiter.max - self.window_count
        if left <= 0:
            self.limited_until = self.window_start + limiter.duration
            return 0
        return min(wanted, left)

    # ------------------------------------------------------------------ settling
    def locked(self, job_id: str, token: str | None, operation: str) -> JobRecord:
        """The active job `job_id` held with `token`; raise when it is not."""
        record = self.jobs.get(job_id)
        if record is None:
            raise JobNotFoundError(self.name, job_id)
        lock = self.active.get(job_id)
        if lock is None:
            raise LockError(job_id, operation, f"it is not active (it is {record.state})")
        if token is not None and token != SKIP_LOCK_TOKEN and lock[0] != token:
            raise LockError(job_id, operation, "the lock is held by another token")
        return record

    def finish(self, job_id: str, token: str, outcome: Completed | Failed, now: int) -> None:
        completed = isinstance(outcome, Completed)
        record = self.locked(job_id, token, "complete" if completed else "fail")
        if record.parent_key is not None and not self.engine.all_locked:
            raise CrossQueue
        self._detach(record)
        record.attempts_made += 1
        record.finished_on = now
        if isinstance(outcome, Completed):
            record.returnvalue = outcome.returnvalue
            self._finish_into(record, "completed", now)
            self.emit("completed", job_id, outcome.returnvalue, now)
        else:
            self._fail(record, outcome.reason, list(outcome.stacktrace), now)
        if record.parent_key is not None:
            flows.child_finished(self, record, now)

    def _fail(self, record: JobRecord, reason: str, stacktrace: Sequence[str], now: int) -> None:
        record.failed_reason = reason
        record.stacktrace = stacktrace
        self._finish_into(record, "failed", now)
        self.emit("failed", record.id, {"failedReason": reason, "prev": "active"})
        if record.attempts_made >= record.opts.get("attempts", 1):
            self.emit("retries-exhausted", record.id, {"attemptsMade": record.attempts_made})

    def retry(self, job_id: str, token: str, outcome: Retry, now: int) -> None:
        record = self.locked(job_id, token, "retry")
        self._detach(record)
        record.attempts_made += 1
        record.failed_reason = outcome.reason
        record.stacktrace = list(outcome.stacktrace)
        if outcome.delay > 0:
            record.delay = outcome.delay
            self._delay(record, now + outcome.delay)
        else:
            self.to_wait(record, "failed")

    def move_to_delayed(self, job_id: str, due: int, token: str | None, now: int) -> None:
        record = self.locked(job_id, token, "delay")
        self._detach(record)
        record.delay = max(0, due - now)
        self._delay(record, due)

    def hand_back(self, job_id: str, token: str) -> None:
        """Active -> next in line, without counting an attempt."""
        record = self.locked(job_id, token, "hand back")
        self._detach(record)
        record.attempts_started = max(0, record.attempts_started - 1)
        self._enqueue(record, front=True)
        self.emit("waiting", job_id, {"prev": "active"})

    def extend_locks(self, locks: Iterable[tuple[str, str]], duration: int, now: int) -> list[str]:
        lost = []
        active = self.active
        for job_id, token in locks:
            lock = active.get(job_id)
            if lock is None or lock[0] != token:
                lost.append(job_id)
            else:
                active[job_id] = (token, now + duration)
        return lost

    def move_stalled(self, max_stalled: int, now: int) -> StalledResult:
        result = StalledResult()
        expired = [job_id for job_id, (_, expiry) in self.active.items() if expiry < now]
        if not self.engine.all_locked and any(self.jobs[i].parent_key for i in expired):
            raise CrossQueue
        for job_id in expired:
            record = self.jobs[job_id]
            self._detach(record)
            record.stalled_counter += 1
            self.emit("stalled", job_id)
            if record.stalled_counter > max_stalled:
                record.attempts_made += 1
                record.finished_on = now
                self._fail(record, STALLED_REASON, record.stacktrace, now)
                if record.parent_key is not None:
                    flows.child_finished(self, record, now)
                result.failed.append(job_id)
            else:
                self._enqueue(record, front=True)
                self.emit("waiting", job_id, {"prev": "active"})
                result.stalled.append(job_id)
        return result

    # ------------------------------------------------------------------ queries
    def record(self, job_id: str) -> JobRecord:
        record = self.jobs.get(job_id)
        if record is None:
            raise JobNotFoundError(self.name, job_id)
        return record

    def counts(self, states: Sequence[str]) -> dict[str, int]:
        return {state: self._count(state) for state in states}

    def _count(self, state: str) -> int:
        if state in ("waiting", "paused"):
            return len(self.wait) if self.paused == (state == "paused") else 0
        sizes: dict[str, Sized] = {
            "active": self.active,
            "completed": self.completed,
            "failed": self.failed,
            "delayed": self.delayed_key,
            "prioritized": self.prio,
            "waiting-children": self.waiting_children,
        }
        return len(sizes[state])

    def counts_per_priority(self, priorities: Sequence[int]) -> dict[str, int]:
        found: dict[int, int] = {}
        for priority, _, _ in self.prio.ordered():
            found[priority] = found.get(priority, 0) + 1
        found[0] = len(self.wait)
        return {str(p): found.get(p, 0) for p in priorities}

    def ids_in(self, state: str, asc: bool) -> list[str]:
        """Ids of the jobs in `state`, oldest (or next to run) first when `asc`."""
        if state in ("waiting", "paused"):
            ids = list(self.wait) if self.paused == (state == "paused") else []
        elif state == "prioritized":
            ids = [entry[2] for entry in self.prio.ordered()]
        elif state == "delayed":
            ids = [entry[2] for entry in self.delayed]
        else:
            ids = list(self._ordered_dict(state))
        return ids if asc else ids[::-1]

    def _ordered_dict(self, state: str) -> dict[str, Any]:
        named: dict[str, dict[str, Any]] = {
            "active": self.active,
            "completed": self.completed,
            "failed": self.failed,
            "waiting-children": self.waiting_children,
        }
        return named[state]

    def get_jobs(self, states: Sequence[str], start: int, end: int, asc: bool) -> list[JobRecord]:
        ids = [job_id for state in states for job_id in self.ids_in(state, asc)]
        stop = None if end == -1 else end + 1
        return [self.jobs[job_id] for job_id in ids[start:stop]]

    def get_logs(self, job_id: str, start: int, end: int, asc: bool) -> tuple[list[str], int]:
        rows = self.logs.get(job_id, [])
        ordered = rows if asc else rows[::-1]
        stop = None if end == -1 else end + 1
        return ordered[start:stop], len(rows)

    # ------------------------------------------------------------------ job mutations
    def add_log(self, job_id: str, row: str, keep: int | None) -> int:
        self.record(job_id)
        self.mark(job_id)
        rows = self.logs.setdefault(job_id, [])
        rows.append(row)
        if keep is not None and len(rows) > keep:
            del rows[: len(rows) - keep]
        return len(rows)

    def clear_logs(self, job_id: str, keep: int) -> None:
        rows = self.logs.get(job_id)
        if rows is not None:
            del rows[: max(0, len(rows) - keep)]
            self.mark(job_id)

    def update_progress(self, job_id: str, progress: Any, text: str) -> None:
        self.record(job_id).progress = progress
        self.mark(job_id)
        self.emit("progress", job_id, text)

    def update_data(self, job_id: str, data: str) -> None:
        self.record(job_id).data = data
        self.mark(job_id)

    def change_priority(self, job_id: str, priority: int, lifo: bool) -> None:
        record = self.record(job_id)
        self.mark(job_id)
        record.priority = priority
        record.opts = {**record.opts, "priority": priority}
        if record.state in ("waiting", "prioritized"):
            self._detach(record)
            self._enqueue(record, lifo)

    def delayed_record(self, job_id: str, operation: str) -> JobRecord:
        record = self.record(job_id)
        if record.state != "delayed":
            raise JobStateError(job_id, f"{record.state}, not delayed", operation)
        return record

    def change_delay(self, job_id: str, delay: int, now: int) -> None:
        record = self.delayed_record(job_id, "change the delay of")
        self._detach(record)
        record.delay = delay
        self._delay(record, now + delay)

    def promote(self, job_id: str) -> None:
        record = self.delayed_record(job_id, "promote")
        self._detach(record)
        record.delay = 0
        self.to_wait(record, "delayed")

    def reprocess(self, job_id: str, state: str) -> None:
        record = self.record(job_id)
        if record.state != state:
            raise JobStateError(job_id, f"{record.state}, not {state}", "retry")
        self._detach(record)
        record.finished_on = None
        record.processed_on = None
        if state == "completed":
            record.returnvalue = None
        else:
            record.failed_reason = None
        self.to_wait(record, state)

    def remove(self, job_id: str, remove_children: bool) -> bool:
        record = self.jobs.get(job_id)
        if record is None or record.state == "active":
            return False
        if not self.engine.all_locked and (record.parent_key or self._has_children(job_id)):
            raise CrossQueue
        prev = record.state
        if remove_children:
            flows.remove_children(self, job_id)
        self._drop(record)
        self.emit("removed", job_id, {"prev": prev})
        if record.parent_key is not None:
            flows.child_removed(self, record)
        return True

    def _has_children(self, job_id: str) -> bool:
        return any(
            job_id in links
            for links in (self.pending, self.processed, self.failed_children, self.ignored)
        )

    # ------------------------------------------------------------------ queue admin
    def set_paused(self, paused: bool) -> None:
        if self.paused != paused:
            self.paused = paused
            self.changed()
            self.emit("paused" if paused else "resumed")

    def drain(self, delayed: bool) -> None:
        doomed = list(self.wait) + [entry[2] for entry in self.prio.ordered()]
        if delayed:
            doomed += [entry[2] for entry in self.delayed]
        for job_id in doomed:
            self._drop(self.jobs[job_id])

    def clean(self, grace: int, limit: int, state: str, now: int) -> list[str]:
        cutoff = now - grace
        removed: list[str] = []
        for job_id in self.ids_in(state, asc=True):
            if limit and len(removed) >= limit:
                break
            record = self.jobs[job_id]
            stamp = record.finished_on if state in ("completed", "failed") else record.timestamp
            if (stamp or 0) <= cutoff:
                self._drop(record)
                removed.append(job_id)
        self.emit("cleaned", None, {"count": str(len(removed))})
        return removed

    def check_obliterate(self, force: bool) -> None:
        if self.active and not force:
            raise PsyqError(
                f"cannot obliterate queue {self.name!r}: {len(self.active)} jobs are active "
                "(close their workers first, or pass force=True)"
            )

    def retry_finished(self, state: str, count: int, before: int) -> int:
        moved = 0
        for job_id in self.ids_in(state, asc=True):
            if count and moved >= count:
                break
            if (self.jobs[job_id].finished_on or 0) <= before:
                self.reprocess(job_id, state)
                moved += 1
        return moved

    def promote_all(self, count: int) -> int:
        moved = 0
        while self.delayed and (not count or moved < count):
            self.promote(self.delayed[0][2])
            moved += 1
        return moved

    # ------------------------------------------------------------------ schedulers
    def schedule_next(self, record: JobRecord, now: int) -> None:
        schedulers.create_next(self, record, now)
