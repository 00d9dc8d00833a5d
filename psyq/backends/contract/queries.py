"""The contract's Queries group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.contract.shapes import (
    JobCounts,
)
from psyq.backends.records import (
    JobRecord,
)

__all__ = ["Queries"]


class Queries(AdapterRoot):
    """Reading jobs, counts and logs; nothing is changed."""

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
    async def get_job_counts(self, queue: str, states: Sequence[str]) -> JobCounts:
        """{state: count} for each of `states` (every state when empty)."""

    @abstractmethod
    async def get_job_logs(
        self, queue: str, job_id: str, start: int, end: int, asc: bool
    ) -> tuple[list[str], int]: ...

    @abstractmethod
    async def is_paused(self, queue: str) -> bool: ...

    async def list_queues(self) -> list[str]:
        raise self._unsupported("listing queues")
