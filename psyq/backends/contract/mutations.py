"""The contract's JobMutations group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from psyq.backends.contract.root import AdapterRoot

__all__ = ["JobMutations"]


class JobMutations(AdapterRoot):
    """Changing one job that no worker needs to hold."""

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
