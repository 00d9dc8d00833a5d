"""The dict-shaped values of the contract, typed: what `get_queue_meta`, `get_metrics`,
`get_flow`, `get_dependencies` and `get_job_scheduler` give back.

They are TypedDicts, so at run time each is the plain dict every backend built before (the
psyq:// protocol packs it as a MessagePack map, migration writes it as JSON); only a type
checker sees the keys. A store adds no key of its own: the shape is the contract's.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from psyq.backends.records import JobRecord

__all__ = [
    "Dependencies",
    "FlowTree",
    "GroupInfo",
    "GroupSettings",
    "JobCounts",
    "Metrics",
    "MetricsMeta",
    "QueueMeta",
    "SchedulerEntry",
    "SchedulerTemplate",
]

#: {state: number of jobs in it} (get_job_counts), {priority as text: count}
#: (get_counts_per_priority)
JobCounts = dict[str, int]


class FlowTree(TypedDict):
    """A job and its children's trees, down to the depth asked (get_flow)."""

    job: JobRecord
    children: list[FlowTree]


class Dependencies(TypedDict):
    """A parent's children by outcome, each named by its job key (get_dependencies)."""

    #: {child key: its return value as JSON text}
    processed: dict[str, str]
    #: the keys of the children not finished yet, sorted
    unprocessed: list[str]
    #: {child key: its failed reason}, children whose failure fails the parent
    failed: dict[str, str]
    #: {child key: its failed reason}, children whose failure the parent ignores
    ignored: dict[str, str]


class MetricsMeta(TypedDict):
    count: int  # jobs finished so far, all minutes together


class Metrics(TypedDict):
    """BullMQ's getMetrics: a count per minute, newest first, sliced [start, end]."""

    meta: MetricsMeta
    data: list[int]
    count: int  # how many minutes are kept (the length before the slice)


class SchedulerTemplate(TypedDict):
    data: str  # JSON text
    opts: dict[str, Any]


class SchedulerEntry(TypedDict):
    """A job scheduler as `get_job_scheduler` shows it (BullMQ's fields): the spec's keys
    appear only when the spec sets them."""

    key: str  # the scheduler's id
    name: str  # its jobs' name
    template: SchedulerTemplate
    iterationCount: int
    next: int | None  # ms of the run not yet taken by a worker; None: none pending
    pattern: NotRequired[str]
    tz: NotRequired[str]
    every: NotRequired[int]
    limit: NotRequired[int]
    startDate: NotRequired[int]
    endDate: NotRequired[int]
    offset: NotRequired[int]


class QueueMeta(TypedDict):
    """What migration moves besides jobs (get_queue_meta / set_queue_meta), as JSON values."""

    paused: bool
    last_id: int  # the auto id counter (set_queue_meta only moves it up)
    limited_until: int  # ms the queue's rate limit ends at; 0: not limited
    global_limiter: list[int] | None  # [max, duration ms]
    global_concurrency: int | None
    #: {dedup id: [job id, expiry ms or None]}
    dedup: dict[str, list[Any]]
    #: {scheduler id: {...its spec, "template": [name, data, opts, timestamp],
    #: "iterationCount", "next", "pending"}}
    schedulers: dict[str, dict[str, Any]]
    max_len_events: int
    #: {group id: its own settings}, only groups that have some (absent: none)
    groups: NotRequired[dict[str, GroupSettings]]


class GroupSettings(TypedDict, total=False):
    """A group's own settings, kept until changed back (BullMQ Pro keeps them too)."""

    concurrency: int  # overrides the worker's group concurrency
    limiter: list[int]  # [max, duration ms], overrides the worker's group limit
    paused: bool


class GroupInfo(TypedDict):
    """One group as `get_groups` lists it."""

    id: str
    waiting: int  # jobs waiting in the group (its line)
    active: int  # jobs of the group being processed
    #: "waiting" (it can be served), "paused", "limited" (its rate limit's window is full)
    #: or "full" (as many active as its concurrency allows)
    status: str
