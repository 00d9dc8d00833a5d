"""`Job`: one unit of work, as the user sees it, and the rule that turns a failure into a
retry or a final failure (used by the Worker and by manual processing alike)."""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from psyq.backends.base import (
    BackendAdapter,
    Completed,
    Dependencies,
    Failed,
    FetchRequest,
    JobRecord,
    Retry,
)
from psyq.core import gate
from psyq.core.backoff import BackoffStrategy, backoff_delay
from psyq.errors import (
    InvalidDataError,
    InvalidOptionsError,
    JobNotFoundError,
    JobStateError,
    LockError,
    UnrecoverableError,
)
from psyq.rules import codec
from psyq.rules.limits import MAX_DELAY_MS, MAX_TIMESTAMP_MS, check_int

if TYPE_CHECKING:
    from psyq.core.events import EventEmitter


class QueueEventsLike(Protocol):
    """What `Job.wait_until_finished` needs of a QueueEvents (the events issue adds it)."""

    async def wait_job_finished(self, job_id: str, timeout: float | None) -> Any: ...


__all__ = ["Job", "QueueRef", "failure_outcome"]

DEFAULT_STACK_TRACE_LIMIT = 10


@dataclass(slots=True)
class QueueRef:
    """What a Job needs of its owner: the queue name, the backend, and (on workers) the
    custom backoff strategies and the emitter for `progress` events."""

    name: str
    backend: BackendAdapter
    backoff_strategies: Mapping[str, BackoffStrategy] = field(default_factory=dict)
    emitter: EventEmitter | None = None


class Job:
    """A job of a queue. Attributes are a snapshot taken when the job was read."""

    __slots__ = (
        "_cancelled",
        "_completed_in",
        "_data",
        "_data_json",
        "_discarded",
        "_keep",
        "_opts",
        "_opts_read",
        "_queue",
        "_returnvalue",
        "_returnvalue_json",
        "_stack",
        "_stack_read",
        "attempts_made",
        "attempts_started",
        "delay",
        "failed_reason",
        "finished_on",
        "id",
        "name",
        "parent_key",
        "priority",
        "processed_by",
        "processed_on",
        "progress",
        "stalled_counter",
        "timestamp",
        "token",
    )

    def __init__(self, queue: QueueRef, record: JobRecord) -> None:
        self._queue = queue
        self._data_json = record.data
        self._data: Any = _UNSET
        self._returnvalue_json = record.returnvalue
        self._returnvalue: Any = _UNSET
        self.id = record.id
        self.name = record.name
        # The store's options and stack trace, which it may share among jobs: read only
        # here; `opts` and `stacktrace` give the job its own copy when first asked.
        self._opts_read: dict[str, Any] = record.opts
        self._opts: dict[str, Any] | None = None
        self._stack_read: Sequence[str] = record.stacktrace
        self._stack: list[str] | None = None
        self.timestamp = record.timestamp
        self.delay = record.delay
        self.priority = record.priority
        self.progress = record.progress
        self.attempts_made = record.attempts_made
        self.attempts_started = record.attempts_started
        self.stalled_counter = record.stalled_counter
        self.processed_on = record.processed_on
        self.finished_on = record.finished_on
        self.failed_reason = record.failed_reason
        self.parent_key = record.parent_key
        self.processed_by = record.processed_by
        self.token = record.lock_token
        self._cancelled: str | None = None
        self._discarded = False
        self._completed_in: Completed | None = None  # complete_in wrote this completion
        # the worker's removeOnComplete, which complete_in applies as the worker would
        self._keep: bool | int | dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<Job {self.queue_name}:{self.id} {self.name!r}>"

    # ------------------------------------------------------------------ values
    @property
    def opts(self) -> dict[str, Any]:
        """The job's options (BullMQ's `opts`). Its own copy, made when first asked: a store
        may share one options dict among many jobs (the gate and the engine share one
        among a group's jobs, so its `group` is copied too), and a job made for every add
        or take should not cost an allocation nobody reads."""
        if self._opts is None:
            opts = self._opts = dict(self._opts_read)
            group = opts.get("group")
            if type(group) is dict:
                opts["group"] = dict(group)
        return self._opts

    @opts.setter
    def opts(self, value: dict[str, Any]) -> None:
        self._opts = value

    def option(self, name: str, default: Any = None) -> Any:
        """One option, read without making the job a copy of its options."""
        return (self._opts_read if self._opts is None else self._opts).get(name, default)

    @property
    def stacktrace(self) -> list[str]:
        """The job's stack traces, newest last (its own list, as `opts`)."""
        if self._stack is None:
            self._stack = list(self._stack_read)
        return self._stack

    @stacktrace.setter
    def stacktrace(self, value: list[str]) -> None:
        self._stack = value

    @property
    def queue_name(self) -> str:
        return self._queue.name

    @property
    def queue_qualified_name(self) -> str:
        """The queue as its store names it in job keys (BullMQ's `queueQualifiedName`):
        `bull:<queue>`, or `<queue>` on Postgres. A child's `parent` option is
        `{"id": job.id, "queue": job.queue_qualified_name}`."""
        return self._queue.backend.queue_key(self._queue.name)

    @property
    def key(self) -> str:
        """The job's key, as a parent key and children values name it."""
        return self._queue.backend.job_key(self._queue.name, self.id)

    @property
    def data(self) -> Any:
        if self._data is _UNSET:
            self._data = codec.loads(self._data_json)
        return self._data

    @data.setter
    def data(self, value: Any) -> None:
        """Replace this snapshot's data, as assigning `job.data` in BullMQ does (middleware
        that opens a packed payload uses it); the store keeps its own: `update_data` writes."""
        self._data = value

    @property
    def returnvalue(self) -> Any:
        if self._returnvalue is _UNSET:
            self._returnvalue = codec.loads(self._returnvalue_json)
        return self._returnvalue

    def to_dict(self) -> dict[str, Any]:
        """The job as plain JSON-able values (for logs, dashboards, tests)."""
        names = [n for n in self.__slots__ if not n.startswith("_") and n != "token"]
        return {
            "queue_name": self.queue_name,
            "data": self.data,
            "returnvalue": self.returnvalue,
            "opts": self.opts,
            "stacktrace": self.stacktrace,
            **{n: getattr(self, n) for n in names},
        }

    @property
    def _backend(self) -> BackendAdapter:
        return self._queue.backend

    # ------------------------------------------------------------------ reading
    async def get_state(self) -> str:
        return await self._backend.get_state(self.queue_name, self.id)

    async def is_completed(self) -> bool:
        return await self.get_state() == "completed"

    async def is_failed(self) -> bool:
        return await self.get_state() == "failed"

    async def is_delayed(self) -> bool:
        return await self.get_state() == "delayed"

    async def is_active(self) -> bool:
        return await self.get_state() == "active"

    async def is_waiting(self) -> bool:
        return await self.get_state() == "waiting"

    async def refresh(self) -> Job:
        """A fresh snapshot of this job from the backend (raises if it is gone)."""
        record = await self._backend.get_job(self.queue_name, self.id)
        if record is None:
            raise JobNotFoundError(self.queue_name, self.id)
        return Job(self._queue, record)

    # ------------------------------------------------------------------ updates
    async def update_progress(self, progress: Any) -> None:
        codec.dumps(progress, "progress", self.id)
        await self._backend.update_progress(self.queue_name, self.id, progress)
        self.progress = progress
        if self._queue.emitter is not None:
            self._queue.emitter.emit("progress", self, progress)

    async def log(self, row: str) -> int:
        """Append a log row (kept to the newest `keepLogs`); returns the number of rows."""
        keep = self.option("keepLogs")
        line = gate.text("log row", str(row), self.id)
        return await self._backend.add_log(self.queue_name, self.id, line, keep)

    async def update_data(self, data: Any) -> None:
        text = codec.dumps(data, "data", self.id, self.option("sizeLimit"))
        await self._backend.update_data(self.queue_name, self.id, text)
        self._data_json, self._data = text, data

    async def change_priority(self, priority: int = 0, lifo: bool = False) -> None:
        check_int("priority", priority, maximum=2**21 - 1)
        if "group" in self.opts and (priority or lifo):
            raise InvalidOptionsError(
                f"job {self.id!r} is in group {self.opts['group']['id']!r}: its order is the "
                "group's (FIFO, or the group priority it was added with)",
                option="priority",
            )
        await self._backend.change_priority(self.queue_name, self.id, priority, lifo)
        self.priority = priority

    async def change_delay(self, delay: int) -> None:
        check_int("delay", delay, maximum=MAX_DELAY_MS)
        await self._backend.change_delay(self.queue_name, self.id, delay)
        self.delay = delay

    async def promote(self) -> None:
        await self._backend.promote(self.queue_name, self.id)
        self.delay = 0

    async def retry(
        self,
        state: str = "failed",
        *,
        reset_attempts_made: bool = False,
        reset_attempts_started: bool = False,
    ) -> None:
        """Move a failed (or completed) job back to waiting. Its attempt counters stay, as
        BullMQ keeps them, unless reset: a job that used all its attempts then fails for
        good at its next failure."""
        if state not in ("failed", "completed"):
            raise InvalidOptionsError(f"retry state must be 'failed' or 'completed', got {state!r}")
        reset = (bool(reset_attempts_made), bool(reset_attempts_started))
        await self._backend.reprocess_job(self.queue_name, self.id, state, *reset)
        self.failed_reason, self.finished_on, self.processed_on = None, None, None
        self._returnvalue_json, self._returnvalue = None, None
        if reset[0]:
            self.attempts_made = 0
        if reset[1]:
            self.attempts_started = 0

    async def remove(self, remove_children: bool = True) -> None:
        removed = await self._backend.remove_job(self.queue_name, self.id, remove_children)
        if not removed:
            state = await self.get_state()
            raise JobStateError(self.id, state, "remove")

    # ------------------------------------------------------------------ locked transitions
    async def extend_lock(self, token: str, duration: int) -> None:
        lost = await self._backend.extend_locks(self.queue_name, {self.id: token}, duration)
        if lost:
            raise LockError(self.id, "extend the lock of")

    async def move_to_completed(
        self, returnvalue: Any, token: str, fetch_next: bool = False, lock_duration: int = 30000
    ) -> Job | None:
        """Complete this active job; with fetch_next, take and return the next job."""
        text = codec.dumps(returnvalue, "return value", self.id)
        fetch = FetchRequest([token], lock_duration) if fetch_next else None
        nxt = await self._backend.move_to_finished(
            self.queue_name, self.id, token, Completed(text), fetch
        )
        self._returnvalue_json, self._returnvalue = text, returnvalue
        self.attempts_made += 1
        return Job(self._queue, nxt[0]) if nxt else None

    async def complete_in(self, transaction: object, returnvalue: Any = None) -> None:
        """Complete this job on `transaction`, a connection inside the application's open
        transaction (Postgres only; docs/transactions.md): it completes when the
        application commits, with whatever else the transaction wrote. The job's lock is
        checked there: a job taken from this worker (stalled, lock lost) raises LockError,
        and the application's transaction fails with it. The worker does not settle the
        job again when the processor returns."""
        if not self.token:
            raise LockError(self.id, "complete", "it holds no lock (no worker took it)")
        text = codec.dumps(returnvalue, "return value", self.id)
        outcome = Completed(text, self._keep)
        await self._backend.complete_in(transaction, self.queue_name, self.id, self.token, outcome)
        self._completed_in = outcome

    async def move_to_failed(self, error: BaseException, token: str) -> None:
        """Fail this attempt: retried with backoff while attempts remain, else failed."""
        outcome = failure_outcome(self, error, self._queue.backoff_strategies)
        await settle_failure(self, token, outcome)

    async def move_to_delayed(self, timestamp: int, token: str | None = None) -> None:
        """Delay this active job until `timestamp` (ms); then raise psyq.DelayedError."""
        check_int("timestamp", timestamp, maximum=MAX_TIMESTAMP_MS)
        await self._backend.move_to_delayed(self.queue_name, self.id, timestamp, token)

    async def move_to_waiting_children(self, token: str) -> bool:
        """Wait for pending children; then raise psyq.WaitingChildrenError. False when
        there is nothing to wait for."""
        return await self._backend.move_to_waiting_children(self.queue_name, self.id, token)

    async def clear_logs(self, keep: int = 0) -> None:
        """Drop this job's log rows except the newest `keep`."""
        await self._backend.clear_logs(self.queue_name, self.id, check_int("keep", keep))

    def discard(self) -> None:
        """Do not retry this job: its next failure is final (as BullMQ's job.discard())."""
        self._discarded = True

    @property
    def cancelled(self) -> str | None:
        """The reason, once `queue.cancel_job` asked the worker to stop this job."""
        return self._cancelled

    # ------------------------------------------------------------------ flows
    async def get_children_values(self) -> dict[str, Any]:
        """{child key: return value} of the children that completed."""
        raw = await self._backend.get_children_values(self.queue_name, self.id)
        return {key: codec.loads(value) for key, value in raw.items()}

    async def get_failed_children_values(self) -> dict[str, str]:
        """{child key: failed reason} of children that failed (and kept the parent going)."""
        return await self._backend.get_failed_children_values(self.queue_name, self.id)

    async def get_dependencies(self) -> Dependencies:
        return await self._backend.get_dependencies(self.queue_name, self.id)

    async def wait_until_finished(
        self, queue_events: QueueEventsLike, timeout: float | None = None
    ) -> Any:
        return await queue_events.wait_job_finished(self.id, timeout)


_UNSET: Any = object()


def failure_outcome(
    job: Job,
    error: BaseException,
    strategies: Mapping[str, BackoffStrategy],
    keep: bool | int | dict[str, Any] | None = None,
) -> Failed | Retry:
    """Decide what a failed attempt becomes: a Retry (with backoff) or a final Failed. A
    value that cannot be stored (InvalidDataError) fails the job at once: the processor's
    work is done, and running it again would repeat it only to fail the same way. `keep`:
    the worker's removeOnFail, for a job without its own."""
    reason = codec.printable(str(error) or type(error).__name__)
    stack = _stacktrace(job, error)
    attempts = job.option("attempts", 1)
    final = isinstance(error, UnrecoverableError | InvalidDataError)
    if final or job._discarded or job._cancelled or job.attempts_made + 1 >= attempts:
        return Failed(reason, stack, keep)
    try:
        delay = backoff_delay(
            job.option("backoff"), job.attempts_made + 1, error, job, strategies=strategies
        )
    except Exception as wrong:  # an unknown strategy, or one that raised: fail, saying so
        return Failed(f"{reason} (not retried: {codec.printable(str(wrong))})", stack, keep)
    if delay is None:
        return Failed(reason, stack, keep)
    return Retry(reason, stack, delay)


def _stacktrace(job: Job, error: BaseException) -> list[str]:
    limit = job.option("stackTraceLimit", DEFAULT_STACK_TRACE_LIMIT)
    if limit == 0:
        return []
    text = codec.printable("".join(traceback.format_exception(error)))
    return [*job.stacktrace, text][-limit:]


async def settle_failure(job: Job, token: str, outcome: Failed | Retry) -> None:
    backend, queue = job._backend, job.queue_name
    if isinstance(outcome, Retry):
        await backend.retry_job(queue, job.id, token, outcome)
    else:
        await backend.move_to_finished(queue, job.id, token, outcome)
    job.attempts_made += 1
    job.failed_reason = outcome.reason
    job.stacktrace = list(outcome.stacktrace)
