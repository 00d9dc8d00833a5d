"""The values that cross the BackendAdapter contract (psyq/backends/base.py): job records,
what callers hand a transition (new jobs, flow nodes, fetch requests, outcomes) and what
transitions answer (settlements, stalled results, export pages), with the job states and
the error codes backends return."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from psyq.errors import JobNotFoundError, JobStateError, LockError, PsyqError
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = [
    "CHILDREN_PENDING",
    "JOB_STATES",
    "STATE_ORDER",
    "Completed",
    "ErrorCode",
    "ExportPage",
    "Failed",
    "FetchRequest",
    "FlowNode",
    "GroupLimits",
    "JobRecord",
    "JobState",
    "Limiter",
    "NewJob",
    "Retry",
    "Settlement",
    "StalledResult",
    "raise_for_code",
]

JobState = Literal[
    "waiting",
    "active",
    "completed",
    "failed",
    "delayed",
    "prioritized",
    "waiting-children",
    "paused",
    "unknown",
]

# The states in the order of a job's life, as tables of counts show them ("paused": waiting
# while the queue is paused).
STATE_ORDER: tuple[str, ...] = (
    "waiting",
    "paused",
    "prioritized",
    "delayed",
    "active",
    "waiting-children",
    "completed",
    "failed",
)

# The states `get_job_counts` and `get_jobs` understand ("paused" = waiting while paused).
JOB_STATES: tuple[str, ...] = (
    "waiting", "active", "completed", "failed", "delayed", "prioritized", "waiting-children",
    "paused",
)  # fmt: skip


class ErrorCode(enum.IntEnum):
    """Numeric results of transitions (BullMQ's codes, shared by Lua and SQL)."""

    JOB_MISSING = -1
    LOCK_MISSING = -2
    NOT_IN_STATE = -3
    PENDING_CHILDREN = -4
    PARENT_MISSING = -5
    LOCK_MISMATCH = -6
    PARENT_NOT_REPLACEABLE = -7
    SCHEDULER_JOB = -8
    FAILED_CHILDREN = -9
    SCHEDULER_ID_COLLISION = -10
    SCHEDULER_SLOTS_BUSY = -11


# JobStateError.state of a completion refused for a pending child (ErrorCode -4)
CHILDREN_PENDING = "waiting for children"


def raise_for_code(code: int, queue: str, job_id: str, operation: str, state: str = "") -> None:
    """Raise the psyq exception for a negative transition result; do nothing for >= 0."""
    if code >= 0:
        return
    if code == ErrorCode.JOB_MISSING:
        raise JobNotFoundError(queue, job_id)
    if code == ErrorCode.LOCK_MISSING:
        raise LockError(job_id, operation, "its lock is missing (expired or released)")
    if code == ErrorCode.LOCK_MISMATCH:
        raise LockError(job_id, operation, "the lock is held by another token")
    if code == ErrorCode.NOT_IN_STATE:
        raise JobStateError(job_id, state or "not in the required state", operation)
    if code == ErrorCode.PENDING_CHILDREN:
        raise JobStateError(job_id, CHILDREN_PENDING, operation)
    raise PsyqError(f"cannot {operation} job {job_id!r} in {queue!r}: error code {code}")


@dataclass(slots=True)
class JobRecord:
    """A job as stored: the fields of BullMQ's job hash, with Python names."""

    id: str
    queue: str
    name: str
    data: str  # JSON text
    opts: dict[str, Any]  # canonical (camelCase) options
    timestamp: int
    delay: int = 0
    priority: int = 0
    progress: Any = 0
    attempts_made: int = 0
    attempts_started: int = 0
    stalled_counter: int = 0
    processed_on: int | None = None
    finished_on: int | None = None
    returnvalue: str | None = None  # JSON text
    failed_reason: str | None = None
    stacktrace: Sequence[str] = ()  # a shared empty tuple: no per-record list to collect
    parent_key: str | None = None  # "<queue>:<id>" of the parent, when the job has one
    processed_by: str | None = None  # worker name that last took the job
    lock_token: str | None = None  # set on records returned by a fetch
    state: str | None = None  # filled by queries that know it (exports, get_jobs)


@dataclass(slots=True)
class NewJob:
    """A job to add. `data` is JSON text; `opts` are canonical and validated."""

    name: str
    data: str
    opts: dict[str, Any]
    timestamp: int | None = None  # None: the backend's clock at add time


@dataclass(slots=True)
class FlowNode:
    """A job of a flow tree, added atomically with its children (later part of the model)."""

    queue: str
    job: NewJob
    children: list[FlowNode] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Limiter:
    """At most `max` jobs per `duration` ms (worker limiter / global rate limit)."""

    max: int
    duration: int


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """A worker's limits per group: at most `concurrency` jobs of one group active at once
    (across every worker), at most `limiter.max` started per `limiter.duration` ms."""

    concurrency: int | None = None
    limiter: Limiter | None = None


@dataclass(slots=True)
class FetchRequest:
    """Take up to `len(tokens)` jobs; job i is locked with tokens[i] for `lock_duration` ms.
    `held`: a worker's tokens (fresh for each take) of takes whose reply was lost; a backend
    that can find jobs by lock token returns those jobs first, within the count."""

    tokens: Sequence[str]
    lock_duration: int
    worker_name: str | None = None
    limiter: Limiter | None = None
    held: Sequence[str] = ()
    #: the worker's limits for each group (BullMQ Pro's `group` worker option); a group's
    #: own settings (`set_group_concurrency`, `set_group_rate_limit`) override them
    group: GroupLimits | None = None


@dataclass(frozen=True, slots=True)
class Completed:
    returnvalue: str  # JSON text
    # The worker's removeOnComplete, used when the job has none of its own (BullMQ's worker
    # option); None: no default, the job keeps what its options say.
    keep: bool | int | dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The job fails for good (attempts exhausted, unrecoverable or stalled too often)."""

    reason: str
    stacktrace: Sequence[str] = ()
    keep: bool | int | dict[str, Any] | None = None  # the worker's removeOnFail (Completed.keep)


@dataclass(frozen=True, slots=True)
class Retry:
    """The attempt failed but attempts remain: back to waiting, or delayed by `delay` ms."""

    reason: str
    stacktrace: Sequence[str] = ()
    delay: int = 0


@dataclass(frozen=True, slots=True)
class Settlement:
    job_id: str
    token: str
    outcome: Completed | Failed | Retry
    started: int | None = None  # the job's processed_on (when its lease began), if known


@dataclass(slots=True)
class StalledResult:
    stalled: list[str] = field(default_factory=list)  # moved back to waiting
    failed: list[str] = field(default_factory=list)  # failed: stalled more than allowed


@dataclass(slots=True)
class ExportPage:
    """One page of `export_jobs`: records with `state` set, and the cursor of the next page
    (None on the last page). `due`: the due time (ms) of delayed jobs; `deps`: per parent,
    its children as {"pending": [child keys], "processed": {key: JSON}, "failed": {key:
    reason}, "ignored": {key: reason}}. `key_prefix`: the form of the page's job keys (a
    record's `parent_key`, the keys in `deps`), the exporting store's `key_prefix`; an
    import writes them in its own form."""

    jobs: list[JobRecord]
    logs: dict[str, list[str]]
    next_cursor: str | None
    due: dict[str, int] = field(default_factory=dict)
    deps: dict[str, dict[str, Any]] = field(default_factory=dict)
    key_prefix: str | None = DEFAULT_PREFIX
