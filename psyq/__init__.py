"""psyq: BullMQ's job-queue model in asyncio Python, over storage chosen by URL.

The public surface is listed in `__all__` (and in docs/api.md; a test keeps them equal).
`psyq.sync`, the blocking facade, is imported on first use (`psyq.sync.Queue` after
`import psyq`), so asyncio programs never load it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from psyq.backends import DEFAULT_URL, register_backend
from psyq.backends.base import BackendAdapter
from psyq.core.backoff import register_backoff_strategy
from psyq.core.flow import FlowProducer, JobNode
from psyq.core.job import Job
from psyq.core.queue import Queue
from psyq.core.queue_events import QueueEvents
from psyq.core.worker import Worker
from psyq.errors import (
    ClosedError,
    ConnectionError,
    DelayedError,
    GroupMaxSizeExceededError,
    InvalidDataError,
    InvalidOptionsError,
    InvalidURLError,
    JobCancelledError,
    JobFailedError,
    JobNotFoundError,
    JobStateError,
    JobVetoedError,
    LockError,
    ProcessorSignal,
    PsyqError,
    RateLimitError,
    TransactionError,
    UnrecoverableError,
    UnsupportedError,
    WaitingChildrenError,
)
from psyq.plugins import hookimpl, register_plugin, unregister_plugin
from psyq.rules.clock import Clock, ManualClock, SystemClock
from psyq.rules.version import VERSION

if TYPE_CHECKING:
    from psyq import sync as sync
    from psyq_migrate.live import LiveProgress, LiveResult

__version__ = VERSION

__all__ = [
    "DEFAULT_URL",
    "BackendAdapter",
    "Clock",
    "ClosedError",
    "ConnectionError",
    "DelayedError",
    "FlowProducer",
    "GroupMaxSizeExceededError",
    "InvalidDataError",
    "InvalidOptionsError",
    "InvalidURLError",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobNode",
    "JobNotFoundError",
    "JobStateError",
    "JobVetoedError",
    "LockError",
    "ManualClock",
    "ProcessorSignal",
    "PsyqError",
    "Queue",
    "QueueEvents",
    "RateLimitError",
    "SystemClock",
    "TransactionError",
    "UnrecoverableError",
    "UnsupportedError",
    "WaitingChildrenError",
    "Worker",
    "__version__",
    "hookimpl",
    "migrate_live",
    "register_backend",
    "register_backoff_strategy",
    "register_plugin",
    "unregister_plugin",
]


async def migrate_live(
    source: str,
    destination: str,
    queues: Sequence[str] | None = None,
    quiet_for: float = 10.0,
    journal: str | None = None,
    progress: Callable[[LiveProgress], None] | None = None,
) -> LiveResult:
    """Move queues from `source` to `destination` while producers and workers use both
    (docs/migrate.md, "psyq migrate --live"); the mover lives in psyq_migrate, loaded on
    first use."""
    from psyq_migrate.live import migrate_live as run

    return await run(source, destination, queues, quiet_for, journal, progress)


if not TYPE_CHECKING:  # type checkers see `sync` imported above, and no catch-all

    def __getattr__(name: str) -> ModuleType:
        """`psyq.sync`, imported the first time it is named."""
        if name == "sync":
            import importlib

            return importlib.import_module("psyq.sync")
        raise AttributeError(f"module 'psyq' has no attribute {name!r}")
