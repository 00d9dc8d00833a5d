"""`StructuredLogging`: one log record per job and worker event, with fields in `extra`.

    worker = psyq.Worker("emails", send, plugins=[StructuredLogging()])

Records go to the stdlib logger "psyq" (or the one given). Each carries `psyq_event` and the
fields that apply: `queue`, `job_id`, `job_name`, `attempts`, `duration_ms`, `error`,
`delay_ms`, `worker`, so a JSON log formatter can ship them as they are.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from psyq.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from psyq.plugins.views import JobView, WorkerView

__all__ = ["StructuredLogging"]


class StructuredLogging:
    """Log added, completed (with duration), failed, retried, stalled, worker start/stop."""

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self.logger = logger or logging.getLogger("psyq")
        self.level = level

    def _log(self, level: int, event: str, message: str, **fields: Any) -> None:
        if self.logger.isEnabledFor(level):
            self.logger.log(level, message, extra={"psyq_event": event, **fields})

    def _job_fields(self, job: JobView) -> dict[str, Any]:
        return {
            "queue": job.queue_name,
            "job_id": job.id,
            "job_name": job.name,
            "attempts": job.attempts_made,
        }

    @hookimpl
    def psyq_job_added(self, job: JobView) -> None:
        self._log(self.level, "added", f"job {job.id} added", **self._job_fields(job))

    @hookimpl
    def psyq_job_completed(self, job: JobView, result: Any) -> None:
        fields = self._job_fields(job)
        self._log(
            self.level,
            "completed",
            f"job {job.id} completed",
            duration_ms=self._duration(job),
            **fields,
        )

    @hookimpl
    def psyq_job_failed(self, job: JobView, error: BaseException) -> None:
        self._log(
            logging.ERROR,
            "failed",
            f"job {job.id} failed: {error}",
            duration_ms=self._duration(job),
            error=repr(error),
            **self._job_fields(job),
        )

    @hookimpl
    def psyq_job_retried(self, job: JobView, error: BaseException, delay: int) -> None:
        self._log(
            logging.WARNING,
            "retried",
            f"job {job.id} will retry in {delay} ms: {error}",
            duration_ms=self._duration(job),
            error=repr(error),
            delay_ms=delay,
            **self._job_fields(job),
        )

    @hookimpl
    def psyq_job_stalled(self, queue_name: str, job_id: str) -> None:
        self._log(
            logging.WARNING, "stalled", f"job {job_id} stalled", queue=queue_name, job_id=job_id
        )

    @hookimpl
    def psyq_worker_start(self, worker: WorkerView) -> None:
        self._log(self.level, "worker_start", f"worker {worker.id} started", **_worker(worker))

    @hookimpl
    def psyq_worker_stop(self, worker: WorkerView) -> None:
        self._log(self.level, "worker_stop", f"worker {worker.id} stopped", **_worker(worker))

    def _duration(self, job: JobView) -> int | None:
        """Ms since the job became active (its `processed_on`), stateless."""
        if job.processed_on is None:
            return None
        return max(0, time.time_ns() // 1_000_000 - job.processed_on)


def _worker(worker: WorkerView) -> dict[str, Any]:
    return {"queue": worker.name, "worker": worker.id}
