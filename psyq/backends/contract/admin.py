"""The contract's QueueAdmin group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from abc import abstractmethod

from psyq.backends.contract.root import AdapterRoot

__all__ = ["QueueAdmin"]


class QueueAdmin(AdapterRoot):
    """Changing a whole queue: pausing, draining, cleaning, retrying in bulk."""

    @abstractmethod
    async def pause(self, queue: str) -> None: ...

    @abstractmethod
    async def resume(self, queue: str) -> None: ...

    @abstractmethod
    async def drain(self, queue: str, delayed: bool) -> None:
        """Remove waiting and prioritized jobs (and delayed ones when asked)."""

    @abstractmethod
    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        """Remove up to `limit` (0 = all) jobs in `state` older than grace_ms."""

    @abstractmethod
    async def obliterate(self, queue: str, force: bool) -> None:
        """Remove the queue and all its data; refuses while jobs are active unless force."""

    @abstractmethod
    async def retry_jobs(self, queue: str, state: str, count: int, timestamp_ms: int) -> int:
        """Move failed/completed jobs finished before timestamp_ms back to waiting."""

    @abstractmethod
    async def promote_jobs(self, queue: str, count: int) -> int:
        """Move delayed jobs to waiting (all when count is 0)."""
