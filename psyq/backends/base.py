"""The BackendAdapter contract: one async method per atomic state transition or query.

Every backend (memory, SQLite, psyq server client, Redis, Postgres) implements this class, and
`psyq.core` talks to nothing else. Each transition is atomic in its backend: one synchronous
engine call, one Lua script, one SQL transaction.

The contract covers the whole BullMQ model, in groups a type checker sees (each a class of
psyq/backends/contract/: lifecycle, adding, transitions, queries, job mutations, queue
admin, flows, events, schedulers, limits, groups, monitoring, cancellation, transfer, and
the writes in the application's transaction); `BackendAdapter` is all of them. Its abstract methods
are what a new backend must write first; every other method has a default body here (the
generic `settle_many`) or raises `UnsupportedError` naming the backend and the feature. The
five backends implement every method; the psyq:// protocol carries every one but the
lifecycle's open/close and the writes in a transaction (psyq/backends/server/generated.py).
The dict-shaped values are TypedDicts (contract/shapes.py).

Conventions
- `queue` is the queue name; backends add their own prefix.
- A job's key (a parent's, a child's in children values and dependencies) is
  `<queue_key(queue)>:<id>`, in the form each backend chooses once (`key_prefix`, keys.py).
- Times are ms since the epoch, read from the backend's clock (`now_ms`).
- `data` and `returnvalue` travel as JSON text (BullMQ stores them so); `progress` and log rows
  are JSON values / strings.
- A range `start, end` includes `end`, and -1 is the last item (BullMQ's; psyq.rules.slices).
- `JobRecord`s a backend returns belong to the caller, who must treat them as read-only.
- A transition that finds the job missing, the lock not held or the job in the wrong state
  raises the matching `psyq.errors` exception (see `ErrorCode` / `raise_for_code`).
"""

from __future__ import annotations

from psyq.backends.contract.adding import Adding
from psyq.backends.contract.admin import QueueAdmin
from psyq.backends.contract.cancellation import Cancellation
from psyq.backends.contract.events import Events
from psyq.backends.contract.flows import Flows
from psyq.backends.contract.groups import Groups
from psyq.backends.contract.lifecycle import Lifecycle
from psyq.backends.contract.limits import Limits
from psyq.backends.contract.monitoring import Monitoring
from psyq.backends.contract.mutations import JobMutations
from psyq.backends.contract.queries import Queries
from psyq.backends.contract.schedulers import Schedulers
from psyq.backends.contract.shapes import (
    Dependencies,
    FlowTree,
    GroupInfo,
    GroupSettings,
    JobCounts,
    Metrics,
    MetricsMeta,
    QueueMeta,
    SchedulerEntry,
    SchedulerTemplate,
)
from psyq.backends.contract.transaction import InTransaction
from psyq.backends.contract.transfer import Transfer
from psyq.backends.contract.transitions import Transitions
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
    GroupLimits,
    JobRecord,
    JobState,
    Limiter,
    NewJob,
    Retry,
    Settlement,
    StalledResult,
    raise_for_code,
)

# The records live in records.py, the groups and shapes in contract/; they are named here
# too, as every backend imports them from here.
__all__ = [
    "CHILDREN_PENDING",
    "CONTRACT_GROUPS",
    "IN_TRANSACTION",
    "JOB_STATES",
    "STATE_ORDER",
    "BackendAdapter",
    "Completed",
    "Dependencies",
    "ErrorCode",
    "ExportPage",
    "Failed",
    "FetchRequest",
    "FlowNode",
    "FlowTree",
    "GroupInfo",
    "GroupLimits",
    "GroupSettings",
    "JobCounts",
    "JobRecord",
    "JobState",
    "Limiter",
    "Metrics",
    "MetricsMeta",
    "NewJob",
    "QueueMeta",
    "Retry",
    "SchedulerEntry",
    "SchedulerTemplate",
    "Settlement",
    "StalledResult",
    "raise_for_code",
]


# The methods that write on a connection of the caller's own process (its transaction).
IN_TRANSACTION = frozenset({"add_jobs_in", "add_flow_in", "complete_in"})


class BackendAdapter(
    Lifecycle,
    Adding,
    InTransaction,
    Transitions,
    Queries,
    JobMutations,
    QueueAdmin,
    Flows,
    Events,
    Schedulers,
    Limits,
    Groups,
    Monitoring,
    Cancellation,
    Transfer,
):
    """The storage contract every backend implements: every group of psyq/backends/contract/
    (see the module docstring; job keys: `JobKeys`, psyq/backends/keys.py)."""


# The groups in the order a reader (and the psyq:// generator) walks them: the class's own.
CONTRACT_GROUPS: tuple[type, ...] = BackendAdapter.__bases__
