"""The contract's Adding group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.records import (
    JobRecord,
    NewJob,
)

__all__ = ["Adding"]


class Adding(AdapterRoot):
    """Adding jobs."""

    @abstractmethod
    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        """Add all jobs or none. A job whose custom id exists is not added again: its record
        is returned instead. Auto ids are increasing integers per queue."""
