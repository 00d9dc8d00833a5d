"""The contract's Limits group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.records import (
    Limiter,
)

__all__ = ["Limits"]


class Limits(AdapterRoot):
    """Rate limits, global concurrency and deduplication keys."""

    async def rate_limit(self, queue: str, delay_ms: int) -> None:
        raise self._unsupported("rate limits")

    async def get_rate_limit_ttl(self, queue: str, max_jobs: int | None) -> int:
        raise self._unsupported("rate limits")

    async def remove_rate_limit_key(self, queue: str) -> bool:
        """End the queue's rate limit now (BullMQ's removeRateLimitKey: the limiter key
        goes, with the window's count); True when the queue was rate-limited."""
        raise self._unsupported("rate limits")

    async def set_global_rate_limit(self, queue: str, limiter: Limiter | None) -> None:
        raise self._unsupported("global rate limits")

    async def set_global_concurrency(self, queue: str, concurrency: int | None) -> None:
        raise self._unsupported("global concurrency")

    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        raise self._unsupported("deduplication")

    async def remove_deduplication_key(
        self, queue: str, dedup_id: str, job_id: str | None = None
    ) -> bool:
        raise self._unsupported("deduplication")
