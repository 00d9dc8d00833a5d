"""The hooks a psyq plugin may implement (pluggy project name "psyq").

Notification hooks may be plain functions or coroutines; their exceptions are reported as
`error` events and never stop a queue or worker. `psyq_before_add` runs synchronously before
anything is written and may change the job or veto it. `psyq_process` wraps the processor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from psyq.plugins.views import AddSpec, JobView, WorkerView

PROJECT = "psyq"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

CallNext = Callable[["JobView"], Awaitable[Any]]


@hookspec
def psyq_before_add(spec: AddSpec) -> bool | None:
    """Before a job is validated and written: change `spec` in place, or veto by returning
    False or raising `psyq.JobVetoedError`."""


@hookspec
def psyq_job_added(job: JobView) -> None:
    """After a job was written."""


@hookspec
async def psyq_process(job: JobView, call_next: CallNext) -> Any:
    """Middleware around the processor: return `await call_next(job)` (or your own result)."""


@hookspec
def psyq_before_process(job: JobView) -> None:
    """A worker is about to run `job`."""


@hookspec
def psyq_after_process(job: JobView, result: Any, error: BaseException | None) -> None:
    """The processor returned `result` or raised `error`."""


@hookspec
def psyq_job_completed(job: JobView, result: Any) -> None:
    """The job completed."""


@hookspec
def psyq_job_failed(job: JobView, error: BaseException) -> None:
    """The job failed for good (no attempts left, unrecoverable, or stalled too often)."""


@hookspec
def psyq_job_retried(job: JobView, error: BaseException, delay: int) -> None:
    """An attempt failed and the job will run again after `delay` ms."""


@hookspec
def psyq_job_stalled(queue_name: str, job_id: str) -> None:
    """A job's lock expired: it went back to waiting, or failed past max_stalled_count
    (`psyq_job_failed` follows)."""


@hookspec
def psyq_worker_start(worker: WorkerView) -> None:
    """A worker started."""


@hookspec
def psyq_worker_stop(worker: WorkerView) -> None:
    """A worker stopped."""
