"""The contract's Monitoring group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.contract.shapes import (
    JobCounts,
    Metrics,
)

__all__ = ["Monitoring"]


class Monitoring(AdapterRoot):
    """Metrics, counts per priority and the registry of workers."""

    async def get_metrics(self, queue: str, kind: str, start: int, end: int) -> Metrics:
        """The counts per minute of `kind` ("completed" or "failed"), newest first,
        sliced [start, end] (psyq.rules.slices)."""
        raise self._unsupported("metrics")

    async def get_counts_per_priority(self, queue: str, priorities: Sequence[int]) -> JobCounts:
        raise self._unsupported("counts per priority")

    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        raise self._unsupported("worker registry")

    async def unregister_worker(self, queue: str, worker_name: str) -> None:
        raise self._unsupported("worker registry")

    async def get_workers(self, queue: str) -> list[dict[str, Any]]:
        raise self._unsupported("worker registry")
