"""The BackendAdapter contract: one async method per atomic state transition or query.

Every backend (memory, SQLite, psyq server client, Redis, Postgres) implements this class, and
`psyq.core` talks to nothing else. Each transition is atomic in its backend: one synchronous
engine call, one Lua script, one SQL transaction.

The contract covers the whole BullMQ model. Methods that a backend does not implement yet
keep the default body here, which raises `UnsupportedError` naming the backend and feature;
they are listed under "later parts of the model" so a new backend sees the whole surface.

Conventions
- `queue` is the queue name; backends add their own prefix.
- A job's key (a parent's, a child's in children values and dependencies) is
  `<queue_key(queue)>:<id>`, in the form each backend chooses once (`key_prefix`, keys.py).
- Times are ms since the epoch, read from the backend's clock (`now_ms`).
- `data` and `returnvalue` travel as JSON text (BullMQ stores them so); `progress` and log rows
  are JSON values / strings.
- `JobRecord`s a backend returns belong to the caller, who must treat them as read-only.
- A transition that finds the job missing, the lock not held or the job in the wrong state
  raises the matching `psyq.errors` exception (see `ErrorCode` / `raise_for_code`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from psyq.backends.keys import JobKeys
from psyq.backends.records import (
    CHILDREN_PENDING,
    JOB_STATES,
    STATE_ORDER,
    Completed,
    ErrorCode,
    ExportPage,
    Failed,
    FetchRequest,
    FlowNode,
    JobRecord,
    JobState,
    Limiter,
    NewJob,
    Retry,
    Settlement,
    StalledResult,
    raise_for_code,
)
from psyq.errors import PsyqError, TransactionError, UnsupportedError, redact_url

# The records live in records.py; they are named here too, as every backend imports them.
__all__ = [
    "CHILDREN_PENDING",
    "IN_TRANSACTION",
    "JOB_STATES",
    "STATE_ORDER",
    "BackendAdapter",
    "Completed",
    "ErrorCode",
    "ExportPage",
    "Failed",
    "FetchRequest",
    "FlowNode",
    "JobRecord",
    "JobState",
    "Limiter",
    "NewJob",
    "Retry",
    "Settlement",
    "StalledResult",
    "raise_for_code",
]


# The methods that write on a connection of the caller's own process (its transaction).
IN_TRANSACTION = frozenset({"add_jobs_in", "add_flow_in", "complete_in"})


class BackendAdapter(JobKeys, ABC):
    """The storage contract every backend implements. See the module docstring (job keys:
    `JobKeys`, psyq/backends/keys.py)."""

    #: short name used in messages ("memory", "sqlite", "redis", ...)
    kind: str = "backend"
    #: True when one `settle_many` costs less than several `move_to_finished` (a store
    #: across the network): workers then settle the completions of one event-loop turn
    #: together (psyq.core.settle_batch)
    batch_settles: bool = False
    #: With batch_settles: a turn's batch goes out as up to this many calls of at least
    #: SETTLE_GROUP_MIN settles each, sent together, so the store works on the next call while
    #: the worker runs the jobs the previous one brought back (1: one call per batch)
    settle_groups: int = 1
    #: With batch_settles: ms a completion may wait, while the worker's last take found no
    #: other job waiting, to ride on the next call that goes to the store anyway (the take
    #: a job's arrival wakes), so it costs no commit of its own; 0: end of the loop turn
    settle_linger_ms: int = 0
    #: True when the number after the "-" of an event id counts the queue's events one by
    #: one (the engine): a reader given a number not above its last one knows the
    #: store's event history started again (a restarted server) and says so
    event_ids_count: bool = False

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def safe_url(self) -> str:
        """The URL as messages and logs show it: password and token masked."""
        return redact_url(self.url)

    def _unsupported(self, feature: str) -> UnsupportedError:
        return UnsupportedError(self.kind, feature)

    # ------------------------------------------------------------------ lifecycle
    async def open(self) -> None:
        """Connect / load. Called once before first use."""

    async def close(self) -> None:
        """Release connections and flush buffers."""

    @abstractmethod
    async def now_ms(self) -> int:
        """The backend's clock (the store's clock where processes share it)."""

    async def check_ready(self) -> None:
        """Raise (a PsyqError naming why) when the store cannot take changes now; the
        readiness probes and `psyq check` ask it. By default: the store answers (its
        clock); an embedded file also checks it is still the file opened and written."""
        await self.now_ms()

    async def wait_committed(self) -> None:
        """Return once every change this adapter was answered so far is committed as the
        store commits anything: an embedded file's buffered changes (`sqlite:///`, a
        `psyq server --data F`) are written to it, and Postgres's imports (committed
        without waiting for their WAL to reach the disk) are flushed by one synchronous
        commit. Redis commits each call before answering it; `memory://` has nothing to
        commit. A
        caller that must rely on a change surviving a crash of the store's process (the
        live move: a job removed from its source) calls it first."""

    # ------------------------------------------------------------------ adding
    @abstractmethod
    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        """Add all jobs or none. A job whose custom id exists is not added again: its record
        is returned instead. Auto ids are increasing integers per queue."""

    # ------------------------------------------------------------------ in the app's transaction
    # `transaction`: a connection the application holds inside an open transaction; the
    # jobs (or the completion) are written on it, visible when it commits. Only a backend
    # that stores its queues in the application's own database can: the others refuse.
    # They take an object of the caller's process, so no remote protocol carries them
    # (IN_TRANSACTION).
    async def add_jobs_in(
        self, transaction: object, queue: str, jobs: Sequence[NewJob]
    ) -> list[JobRecord]:
        """As add_jobs, written on `transaction`."""
        raise self._no_transactions(transaction)

    async def add_flow_in(self, transaction: object, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """As add_flow, written on `transaction`."""
        raise self._no_transactions(transaction)

    async def complete_in(
        self, transaction: object, queue: str, job_id: str, token: str, outcome: Completed
    ) -> None:
        """Complete an active job on `transaction`, its lock checked there (LockError when
        `token` no longer holds it)."""
        raise self._no_transactions(transaction)

    def _no_transactions(self, transaction: object) -> TransactionError:
        return TransactionError(
            transaction, f"the {self.kind} backend ({self.safe_url}) cannot write in it"
        )

    # ------------------------------------------------------------------ fetching
    @abstractmethod
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        """Promote due delayed jobs, then take up to len(tokens) jobs (plain waiting before
        prioritized; lower priority number first) and lock them. Empty when paused, limited
        or nothing is ready."""

    @abstractmethod
    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        """Return when a job may be ready (added, promoted, resumed) or after timeout_ms.
        Never busy-waits; may return early (callers then fetch and find nothing)."""

    # ------------------------------------------------------------------ settling
    @abstractmethod
    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        """Complete or fail an active job held with `token` (attempts_made + 1), apply its
        retention, and, with `fetch`, take the next jobs in the same call."""

    @abstractmethod
    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        """A failed attempt with attempts left: attempts_made + 1, back to waiting (or
        delayed by outcome.delay ms), honouring lifo/priority."""

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        """Settle several jobs, then fetch. Returns one error (or None) per settlement and
        the fetched jobs. Backends override this to do it in one round trip."""
        errors: list[PsyqError | None] = []
        for item in settlements:
            try:
                if isinstance(item.outcome, Retry):
                    await self.retry_job(queue, item.job_id, item.token, item.outcome)
                else:
                    await self.move_to_finished(queue, item.job_id, item.token, item.outcome)
                errors.append(None)
            except PsyqError as exc:
                errors.append(exc)
        fetched = await self.move_to_active(queue, fetch) if fetch else []
        return errors, fetched

    @abstractmethod
    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        """Move an active job (held with `token`) to delayed until timestamp_ms; no attempt
        is counted."""

    @abstractmethod
    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        """Hand an active job back to waiting without counting an attempt made (rate limit,
        forced close); its start stays counted in `attempts_started`, as in BullMQ."""

    @abstractmethod
    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        """Extend the locks {job_id: token}; return the ids whose lock was lost."""

    @abstractmethod
    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        """Active jobs whose lock expired go back to waiting (stalled_counter + 1), or fail
        when they stalled more than max_stalled_count times."""

    # ------------------------------------------------------------------ queries
    @abstractmethod
    async def get_job(self, queue: str, job_id: str) -> JobRecord | None: ...

    @abstractmethod
    async def get_state(self, queue: str, job_id: str) -> str:
        """One of JOB_STATES (waiting while paused is "waiting"), or "unknown"."""

    @abstractmethod
    async def get_jobs(
        self, queue: str, states: Sequence[str], start: int, end: int, asc: bool
    ) -> list[JobRecord]:
        """Jobs in `states`, concatenated in the order given, sliced [start, end] (end
        inclusive, -1 = last) like BullMQ's getJobs."""

    @abstractmethod
    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]: ...

    @abstractmethod
    async def get_job_logs(
        self, queue: str, job_id: str, start: int, end: int, asc: bool
    ) -> tuple[list[str], int]: ...

    @abstractmethod
    async def is_paused(self, queue: str) -> bool: ...

    async def list_queues(self) -> list[str]:
        raise self._unsupported("listing queues")

    # ------------------------------------------------------------------ job mutations
    @abstractmethod
    async def update_progress(self, queue: str, job_id: str, progress: Any) -> None: ...

    @abstractmethod
    async def add_log(self, queue: str, job_id: str, row: str, keep_logs: int | None) -> int:
        """Append a log row; keep the newest keep_logs rows. Returns the row count."""

    async def clear_logs(self, queue: str, job_id: str, keep: int) -> None:
        """Drop a job's log rows except the newest `keep`."""
        raise self._unsupported("clearing logs")

    @abstractmethod
    async def update_data(self, queue: str, job_id: str, data: str) -> None: ...

    @abstractmethod
    async def change_priority(
        self, queue: str, job_id: str, priority: int, lifo: bool = False
    ) -> None: ...

    @abstractmethod
    async def change_delay(self, queue: str, job_id: str, delay_ms: int) -> None:
        """Move a delayed job's due time to now + delay_ms."""

    @abstractmethod
    async def promote(self, queue: str, job_id: str) -> None:
        """Move a delayed job to waiting now."""

    @abstractmethod
    async def reprocess_job(
        self, queue: str, job_id: str, state: str, made: bool = False, started: bool = False
    ) -> None:
        """Move a completed or failed job (it must be in `state`) back to waiting; `made`,
        `started`: set attemptsMade, attemptsStarted back to 0."""

    @abstractmethod
    async def remove_job(self, queue: str, job_id: str, remove_children: bool = True) -> bool:
        """Remove a job that is not locked; False when it is missing or active."""

    # ------------------------------------------------------------------ queue admin
    @abstractmethod
    async def pause(self, queue: str) -> None: ...

    @abstractmethod
    async def resume(self, queue: str) -> None: ...

    @abstractmethod
    async def drain(self, queue: str, delayed: bool) -> None:
        """Remove waiting and prioritized jobs (and delayed ones when asked)."""

    @abstractmethod
    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        """Remove up to `limit` (0 = all) jobs in `state` older than grace_ms."""

    @abstractmethod
    async def obliterate(self, queue: str, force: bool) -> None:
        """Remove the queue and all its data; refuses while jobs are active unless force."""

    @abstractmethod
    async def retry_jobs(self, queue: str, state: str, count: int, timestamp_ms: int) -> int:
        """Move failed/completed jobs finished before timestamp_ms back to waiting."""

    @abstractmethod
    async def promote_jobs(self, queue: str, count: int) -> int:
        """Move delayed jobs to waiting (all when count is 0)."""

    # ------------------------------------------------------------------ later parts of the model
    # Flows
    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """Add job trees atomically; returns every record in pre-order (a node, then its
        children's subtrees in order), so callers can rebuild the tree."""
        raise self._unsupported("flows")

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> dict[str, Any] | None:
        """{"job": JobRecord, "children": [same, ...]} down to `depth` levels (0 = all)."""
        raise self._unsupported("flows")

    async def move_to_waiting_children(self, queue: str, job_id: str, token: str) -> bool:
        raise self._unsupported("flows")

    async def get_dependencies(self, queue: str, job_id: str) -> dict[str, Any]:
        raise self._unsupported("flows")

    async def get_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        raise self._unsupported("flows")

    async def get_failed_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        raise self._unsupported("flows")

    # Events (QueueEvents)
    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """Events after last_id ("$" = only new ones) as (id, event, fields)."""
        raise self._unsupported("queue events")

    async def newest_event_id(self, queue: str) -> str:
        """The id of the queue's newest event ("0" when it has none): where a reader that
        wants only new events starts, so none added between two of its reads is missed."""
        raise self._unsupported("queue events")

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        raise self._unsupported("queue events")

    # Job schedulers
    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        """Create or replace a scheduler (`repeat` is canonical, see psyq.rules.schedule);
        returns its pending job, or None when the spec allows no more runs."""
        raise self._unsupported("job schedulers")

    async def get_job_scheduler(self, queue: str, scheduler_id: str) -> dict[str, Any] | None:
        raise self._unsupported("job schedulers")

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[dict[str, Any]]:
        raise self._unsupported("job schedulers")

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        raise self._unsupported("job schedulers")

    # Rate limits and global concurrency
    async def rate_limit(self, queue: str, delay_ms: int) -> None:
        raise self._unsupported("rate limits")

    async def get_rate_limit_ttl(self, queue: str, max_jobs: int | None) -> int:
        raise self._unsupported("rate limits")

    async def remove_rate_limit_key(self, queue: str) -> bool:
        """End the queue's rate limit now (BullMQ's removeRateLimitKey: the limiter key
        goes, with the window's count); True when the queue was rate-limited."""
        raise self._unsupported("rate limits")

    async def set_global_rate_limit(self, queue: str, limiter: Limiter | None) -> None:
        raise self._unsupported("global rate limits")

    async def set_global_concurrency(self, queue: str, concurrency: int | None) -> None:
        raise self._unsupported("global concurrency")

    # Deduplication
    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        raise self._unsupported("deduplication")

    async def remove_deduplication_key(
        self, queue: str, dedup_id: str, job_id: str | None = None
    ) -> bool:
        raise self._unsupported("deduplication")

    # Metrics and workers
    async def get_metrics(self, queue: str, kind: str, start: int, end: int) -> dict[str, Any]:
        raise self._unsupported("metrics")

    async def get_counts_per_priority(
        self, queue: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        raise self._unsupported("counts per priority")

    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        raise self._unsupported("worker registry")

    async def unregister_worker(self, queue: str, worker_name: str) -> None:
        raise self._unsupported("worker registry")

    async def get_workers(self, queue: str) -> list[dict[str, Any]]:
        raise self._unsupported("worker registry")

    # Cancellation
    async def cancel_job(self, queue: str, job_id: str, reason: str) -> bool:
        raise self._unsupported("cancellation")

    async def get_cancelled(self, queue: str, job_ids: Sequence[str]) -> dict[str, str]:
        """{job_id: reason} for those of `job_ids` that were cancelled."""
        raise self._unsupported("cancellation")

    # Export / import (migration and the Spark pipeline use only these)
    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        """Up to `limit` jobs of every state, in line order (waiting as they would be taken,
        prioritized, delayed by due time, active, waiting-children, completed and failed by
        finish time). Start with `cursor=None`, then pass each page's `next_cursor`."""
        raise self._unsupported("export")

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        """Write exported jobs idempotently by id, in their states (active ones arrive as
        waiting), without events; returns how many were written. A job already there with
        the same name, data and timestamp is skipped; a different job under the same id
        makes the whole page fail (nothing written) unless `overwrite`."""
        raise self._unsupported("import")

    async def get_queue_meta(self, queue: str) -> dict[str, Any]:
        """Paused flag, id counter, limits, schedulers, dedup keys: what migration moves
        besides jobs, as JSON values: {"paused", "last_id", "limited_until",
        "global_limiter": [max, duration] | None, "global_concurrency", "dedup": {id:
        [job id, expiry ms | None]}, "schedulers": {id: {...spec, "template": [name, data,
        opts, timestamp], "iterationCount", "next", "pending"}}, "max_len_events"}."""
        raise self._unsupported("queue metadata")

    async def set_queue_meta(self, queue: str, meta: Mapping[str, Any]) -> None:
        """Apply what `get_queue_meta` gave (the id counter only moves up)."""
        raise self._unsupported("queue metadata")
