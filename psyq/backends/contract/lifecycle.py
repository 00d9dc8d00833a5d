"""The contract's Lifecycle group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from abc import abstractmethod

from psyq.backends.contract.root import AdapterRoot

__all__ = ["Lifecycle"]


class Lifecycle(AdapterRoot):
    """Opening, closing, the clock and the store's readiness and commits."""

    async def open(self) -> None:
        """Connect / load. Called once before first use."""

    async def close(self) -> None:
        """Release connections and flush buffers."""

    @abstractmethod
    async def now_ms(self) -> int:
        """The backend's clock (the store's clock where processes share it)."""

    async def check_ready(self) -> None:
        """Raise (a PsyqError naming why) when the store cannot take changes now; the
        readiness probes and `psyq check` ask it. By default: the store answers (its
        clock); an embedded file also checks it is still the file opened and written."""
        await self.now_ms()

    async def wait_committed(self) -> None:
        """Return once every change this adapter was answered so far is committed as the
        store commits anything: an embedded file's buffered changes (`sqlite:///`, a
        `psyq server --data F`) are written to it, and Postgres's imports (committed
        without waiting for their WAL to reach the disk) are flushed by one synchronous
        commit. Redis commits each call before answering it; `memory://` has nothing to
        commit. A
        caller that must rely on a change surviving a crash of the store's process (the
        live move: a job removed from its source) calls it first."""
