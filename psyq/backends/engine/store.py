"""`QueueStore`: every job of one queue in memory, and each state transition as one method.

Methods are synchronous and run under the owning shard's lock, so each one is atomic. A
transition that reaches into another queue (a child finishing updates its parent) raises
`CrossQueue` before changing anything unless the engine holds every lock; the backend then
runs it again with all locks (see `flows.py`).

The class is put together by concern: `state.py` holds the structures and the moves every
transition shares, `queries.py` the reads, `mutations.py` the changes outside a job's path
of life and the queue's admin; this module adds, fetches and settles jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psyq.backends.base import (
    Completed,
    ErrorCode,
    Failed,
    FetchRequest,
    JobRecord,
    Limiter,
    NewJob,
    Retry,
    Settlement,
    StalledResult,
    raise_for_code,
)
from psyq.backends.engine import flows, schedulers
from psyq.backends.engine.mutations import Mutations
from psyq.backends.engine.state import (
    SKIP_LOCK_TOKEN,
    STALLED_REASON,
    CrossQueue,
)
from psyq.errors import GroupMaxSizeExceededError, JobNotFoundError, LockError, PsyqError

__all__ = ["NO_OPTS", "QueueStore"]

# The options of every job added without any: one dict for all (64 bytes a job less). The
# engine replaces a record's options, never changes them in place; Job copies them.
NO_OPTS: dict[str, Any] = {}


def _dedup_expiry(
    dedup: dict[str, Any], now: int, replaced: tuple[str, int | None] | None
) -> int | None:
    """When an added job's deduplication key expires: a debounce replace without `extend`
    keeps the replaced job's expiry (BullMQ's `SET ... KEEPTTL`), else the ttl runs from
    now (no ttl: never)."""
    ttl = dedup.get("ttl")
    if replaced is not None and ttl and not dedup.get("extend"):
        return replaced[1]
    return None if ttl is None else now + ttl


class QueueStore(Mutations):
    """One queue's jobs and state. Not thread-safe: the engine holds a lock around calls."""

    # ------------------------------------------------------------------ adding
    def add_jobs(self, jobs: Sequence[NewJob], now: int) -> list[JobRecord]:
        parents = sized = False
        for new in jobs:  # a loop, not a comprehension: no call for the common case
            opts = new.opts
            if opts:
                parents = parents or "parent" in opts
                sized = sized or ("group" in opts and "maxSize" in opts["group"])
        if parents:
            self._check_parents(jobs)
        if sized:
            self.check_group_sizes(jobs)
        if self.last_id + len(jobs) > self.id_limit:  # before any job: all or none
            self.reserve_ids(len(jobs))
        return [self.add(new, now) for new in jobs]

    def _check_parents(self, jobs: Sequence[NewJob]) -> None:
        """Children reach into their parents' queues: every lock, and parents that exist."""
        if not self.engine.all_locked:
            raise CrossQueue
        for new in jobs:
            if new.opts and "parent" in new.opts:
                flows.check_parent(self.engine, new.opts["parent"])

    def check_group_sizes(self, jobs: Sequence[NewJob]) -> None:
        """Raise, before any of `jobs` is added, when one would pass its group's maxSize
        (add_jobs, and a flow's jobs of this queue: flows.check_flow)."""
        adding: dict[str, int] = {}
        for new in jobs:
            group = new.opts.get("group") if new.opts else None
            if group is None:
                continue
            gid = group["id"]
            adding[gid] = adding.get(gid, 0) + 1
            max_size = group.get("maxSize")
            if max_size is not None and self.groups.size(gid) + adding[gid] > max_size:
                raise GroupMaxSizeExceededError(self.name, gid, max_size)

    def add(self, new: NewJob, now: int, hold: bool = False) -> JobRecord:
        """Add a job (`hold`: it waits for children it is about to get)."""
        opts = new.opts
        timestamp = now if new.timestamp is None else new.timestamp
        if not opts and not hold:  # the common case: a plain job
            if self.last_id >= self.id_limit:
                self.reserve_ids(1)
            self.last_id += 1
            job_id = str(self.last_id)
            record = JobRecord(job_id, self.name, new.name, new.data, NO_OPTS, timestamp)
            self.jobs[job_id] = record
            self.wait.append(job_id)
            record.state = "waiting"
            if self.dirty is not None:
                self.dirty.add(job_id)
                self.rank[job_id] = next(self.seq)
                self.version += 1
            events = self.events  # emit's work, without its two calls
            events.add(now, "added", job_id, new.name)
            events.add(now, "waiting", job_id, None)
            return record
        if len(opts) == 1 and "group" in opts and not hold:
            return self._add_grouped(new, now, timestamp)
        return self._add_with_options(new, now, timestamp, hold)

    def _add_grouped(self, new: NewJob, now: int, timestamp: int) -> JobRecord:
        """`add` of a job whose only option is its group (the common grouped add): an
        auto id, the group's shared options, its place in the group's line; the plain
        add's work otherwise (`_next_id` and `_enqueue` inline)."""
        if self.last_id >= self.id_limit:
            self.reserve_ids(1)
        self.last_id += 1
        job_id = str(self.last_id)
        opts = self.groups.add(new.opts, job_id)
        record = JobRecord(job_id, self.name, new.name, new.data, opts, timestamp)
        self.jobs[job_id] = record
        record.state = "waiting"
        if self.dirty is not None:
            self.dirty.add(job_id)
            self.rank[job_id] = next(self.seq)
            self.version += 1
        events = self.events
        events.add(now, "added", job_id, new.name)
        events.add(now, "waiting", job_id, None)
        return record

    def _add_with_options(self, new: NewJob, now: int, timestamp: int, hold: bool) -> JobRecord:
        """`add` for a job with options: a custom id, deduplication, a parent, a delay..."""
        opts = new.opts
        custom = opts.get("jobId")
        if custom is not None and custom in self.jobs:
            self.emit("duplicated", custom)
            return self.jobs[custom]
        # the id is taken before deduplication, as BullMQ does: a deduplicated add's event
        # names the id it would have had
        job_id = self._next_id() if custom is None else custom
        dedup = opts.get("deduplication")
        replaced: tuple[str, int | None] | None = None
        if dedup is not None:
            existing, replaced = self._deduplicated(dedup, now, job_id)
            if existing is not None:
                return existing
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
            self.dedup[dedup["id"]] = (job_id, _dedup_expiry(dedup, now, replaced))
        self.emit("added", job_id, new.name, now)
        if "parent" in opts:
            flows.link_child(self, record)
        if hold:
            self.hold(record)
        else:
            self._place_new(record)
        return record

    def _next_id(self) -> str:
        """The next id of the queue's counter (add's fast path inlines this)."""
        if self.last_id >= self.id_limit:
            self.reserve_ids(1)
        self.last_id += 1
        return str(self.last_id)

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
        self, dedup: dict[str, Any], now: int, new_id: str
    ) -> tuple[JobRecord | None, tuple[str, int | None] | None]:
        """(the job that makes this add a duplicate, None) or, when the add goes on, (None,
        the id and key expiry of the delayed job a debounce replace removed, if any)."""
        entry = self.dedup.get(dedup["id"])
        if entry is None:
            return None, None
        job_id, expiry = entry
        record = self.jobs.get(job_id)
        if record is None or (expiry is not None and expiry <= now):
            del self.dedup[dedup["id"]]
            return None, None
        if dedup.get("replace") and record.state == "delayed":
            self._drop(record)
            self.emit("removed", job_id, {"prev": "delayed"})
            # as BullMQ: the new job and the one it replaced
            extra = {"deduplicationId": dedup["id"], "deduplicatedJobId": job_id}
            self.emit("deduplicated", new_id, extra, now)
            return None, (job_id, expiry)
        if dedup.get("extend") and expiry is not None:
            self.dedup[dedup["id"]] = (job_id, now + dedup["ttl"])
        self.emit(
            "deduplicated",
            job_id,
            {"deduplicationId": dedup["id"], "deduplicatedJobId": new_id},
        )
        return record, None

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
        ready = self.groups.ready_in(now) if self.groups.groups else None
        if self.delayed:
            due: int = max(0, self.delayed[0][0] - now)
            return due if ready is None else min(due, ready)
        return ready

    def promote_due(self, now: int) -> None:
        delayed = self.delayed
        due = delayed.bisect_left((now + 1,))
        if not due:
            return
        ids = [entry[2] for entry in delayed[:due]]
        del delayed[:due]
        self.preload(ids)
        for job_id in ids:
            del self.delayed_key[job_id]
            record = self.jobs[job_id]
            record.delay = 0
            record.state = None
            self.to_wait(record, "delayed")

    def move_to_active(self, request: FetchRequest, now: int) -> list[JobRecord]:
        """Lock and return up to len(request.tokens) ready jobs."""
        if self.delayed:
            self.promote_due(now)
        if self.paused:
            return []
        wanted = self._wanted(request, now)
        taken: list[JobRecord] = []
        wait, prio, jobs, active = self.wait, self.prio, self.jobs, self.active
        loader, resident = self.loader, jobs.keys()
        expiry = now + request.lock_duration
        for token in request.tokens[:wanted]:
            if wait:
                job_id = wait.popleft()
            else:
                job_id = prio.pop()  # type: ignore[assignment]
                if job_id is None:
                    job_id = self._take_grouped(request, now)
                    if job_id is None:
                        break
            if loader is not None and job_id not in resident:
                loader((job_id,), wait)  # only in the file: read with the next of the line
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
        self._after_fetch(taken, now)
        return taken

    def _take_grouped(self, request: FetchRequest, now: int) -> str | None:
        """The next grouped job's id, round-robin over the groups (None: none may start)."""
        if not self.groups.waiting:
            return None
        taken = self.groups.take(request.group, now)
        return None if taken is None else taken[1]

    def _after_fetch(self, taken: list[JobRecord], now: int) -> None:
        """Count what a fetch took in the rate window; a fetch that finds the queue empty
        (once, until jobs come again) emits drained."""
        if taken:
            self.window_count += len(taken)
            self.drained = False
        elif not self.drained and not self.wait and not self.prio and not self.groups:
            self.drained = True
            self.emit("drained", None, None, now)

    def _wanted(self, request: FetchRequest, now: int) -> int:
        """How many jobs a fetch may take: all it asks for, unless a limit applies."""
        free = (
            request.limiter is None
            and self.global_limiter is None
            and self.global_concurrency is None
            and self.limited_until <= now
        )
        if free:
            return len(request.tokens)
        return self._allowed(len(request.tokens), request.limiter, now)

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
        lock = self.active.get(job_id)  # an active job's record is always in memory
        if lock is None:
            record = self.jobs.get(job_id)
            if record is None:
                raise JobNotFoundError(self.name, job_id)
            raise LockError(job_id, operation, f"it is not active (it is {record.state})")
        if token is not None and token != SKIP_LOCK_TOKEN and lock[0] != token:
            raise LockError(job_id, operation, "the lock is held by another token")
        return self.jobs[job_id]

    def move_to_finished(
        self, job_id: str, token: str, outcome: Completed | Failed, now: int
    ) -> None:
        completed = isinstance(outcome, Completed)
        record = self.locked(job_id, token, "complete" if completed else "fail")
        if completed and self.pending.get(job_id):  # a flow gave it a child while it ran
            raise_for_code(ErrorCode.PENDING_CHILDREN, self.name, job_id, "complete")
        if record.parent_key is not None and not self.engine.all_locked:
            raise CrossQueue
        self._detach(record)
        record.attempts_made += 1
        record.finished_on = now
        if isinstance(outcome, Completed):
            record.returnvalue = outcome.returnvalue
            self._finish_into(record, "completed", now, outcome.keep)
            self.emit("completed", job_id, outcome.returnvalue, now)
        else:
            self._fail(record, outcome.reason, list(outcome.stacktrace), now, outcome.keep)
        if record.parent_key is not None:
            flows.child_finished(self, record, now, completed)

    def settle_many(
        self, settlements: Sequence[Settlement], fetch: FetchRequest | None, now: int
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        """`BackendAdapter.settle_many` in one call: each settlement's error (or None), then
        the jobs fetched. A job with a parent needs every lock: CrossQueue is raised before
        anything changes, so the whole call runs again under them all."""
        if not self.engine.all_locked:
            jobs = self.jobs
            for item in settlements:
                record = jobs.get(item.job_id)
                if record is not None and record.parent_key is not None:
                    raise CrossQueue
        errors: list[PsyqError | None] = []
        for item in settlements:
            outcome = item.outcome
            try:
                if isinstance(outcome, Retry):
                    self.retry_job(item.job_id, item.token, outcome, now)
                else:
                    self.move_to_finished(item.job_id, item.token, outcome, now)
                errors.append(None)
            except PsyqError as exc:
                errors.append(exc)
        return errors, (self.move_to_active(fetch, now) if fetch else [])

    def retry_job(self, job_id: str, token: str, outcome: Retry, now: int) -> None:
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

    def move_job_from_active_to_wait(self, job_id: str, token: str) -> None:
        """Active -> next in line, without counting an attempt made (its start stays
        counted: BullMQ counts every move to active in attemptsStarted)."""
        record = self.locked(job_id, token, "hand back")
        self._detach(record)
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

    def move_stalled_jobs_to_wait(self, max_stalled: int, now: int) -> StalledResult:
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
                    flows.child_finished(self, record, now, completed=False)
                result.failed.append(job_id)
            else:
                self._enqueue(record, front=True)
                self.emit("waiting", job_id, {"prev": "active"})
                result.stalled.append(job_id)
        return result

    # ------------------------------------------------------------------ removing (flows)
    def remove_job(self, job_id: str, remove_children: bool) -> bool:
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

    # ------------------------------------------------------------------ schedulers
    def schedule_next(self, record: JobRecord, now: int) -> None:
        schedulers.create_next(self, record, now)
