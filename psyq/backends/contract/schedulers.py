"""The contract's Schedulers group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.contract.shapes import (
    SchedulerEntry,
)
from psyq.backends.records import (
    JobRecord,
    NewJob,
)

__all__ = ["Schedulers"]


class Schedulers(AdapterRoot):
    """Job schedulers: repeatable jobs made from a spec and a template."""

    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        """Create or replace a scheduler (`repeat` is canonical, see psyq.rules.schedule);
        returns its pending job, or None when the spec allows no more runs."""
        raise self._unsupported("job schedulers")

    async def get_job_scheduler(self, queue: str, scheduler_id: str) -> SchedulerEntry | None:
        raise self._unsupported("job schedulers")

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[SchedulerEntry]:
        raise self._unsupported("job schedulers")

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        raise self._unsupported("job schedulers")
