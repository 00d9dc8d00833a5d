"""The contract's Cancellation group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from collections.abc import Sequence

from psyq.backends.contract.root import AdapterRoot

__all__ = ["Cancellation"]


class Cancellation(AdapterRoot):
    """Asking the worker that holds a job to stop it."""

    async def cancel_job(self, queue: str, job_id: str, reason: str) -> bool:
        raise self._unsupported("cancellation")

    async def get_cancelled(self, queue: str, job_ids: Sequence[str]) -> dict[str, str]:
        """{job_id: reason} for those of `job_ids` that were cancelled."""
        raise self._unsupported("cancellation")
