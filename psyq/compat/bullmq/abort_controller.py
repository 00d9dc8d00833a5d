"""`AbortController` / `AbortSignal` / `AbortError`: how a `bullmq` worker asks a running
processor to stop. A processor that takes a third parameter gets the job's signal;
`worker.cancelJob(id, reason)` aborts it. Cooperative: the processor looks at
`signal.aborted` or awaits `signal.wait()`."""

from __future__ import annotations

import asyncio

__all__ = ["AbortController", "AbortError", "AbortSignal"]


class AbortError(Exception):
    """The work was aborted; `reason` says why."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "The operation was aborted")
        self.reason = reason


class AbortSignal:
    """Read side of an AbortController."""

    def __init__(self) -> None:
        self._aborted = asyncio.Event()
        self._reason: str | None = None

    @property
    def aborted(self) -> bool:
        return self._aborted.is_set()

    @property
    def reason(self) -> str | None:
        return self._reason

    async def wait(self) -> None:
        """Return once the signal is aborted."""
        await self._aborted.wait()

    def throw_if_aborted(self) -> None:
        if self.aborted:
            raise AbortError(self._reason)

    throwIfAborted = throw_if_aborted


class AbortController:
    """Owns a signal; `abort(reason)` sets it once (later calls keep the first reason)."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str | None = None) -> None:
        if not self.signal.aborted:
            self.signal._reason = reason
            self.signal._aborted.set()
