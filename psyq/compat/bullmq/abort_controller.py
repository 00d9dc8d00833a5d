"""`AbortController` / `AbortSignal` / `AbortError`: how a `bullmq` worker asks a running
processor to stop. A processor that takes a third parameter gets the job's signal;
`worker.cancelJob(id, reason)` aborts it. Cooperative: the processor looks at
`signal.aborted` or awaits `signal.wait()`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

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
        self._listeners: list[tuple[Callable[..., Any], bool]] = []
        self.onabort: Callable[..., Any] | None = None

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

    # Node's EventTarget side (a ported `signal.addEventListener('abort', ...)`).
    def addEventListener(
        self, type: str, listener: Callable[..., Any], options: Any = None
    ) -> None:
        """Call `listener(event)` when the signal aborts (`type` 'abort'; `{"once": True}`
        is honoured, and a listener is added once however often it is passed)."""
        if type != "abort" or any(known is listener for known, _ in self._listeners):
            return
        once = bool(options.get("once")) if isinstance(options, dict) else False
        self._listeners.append((listener, once))

    def removeEventListener(
        self, type: str, listener: Callable[..., Any], options: Any = None
    ) -> None:
        self._listeners = [entry for entry in self._listeners if entry[0] is not listener]

    def _fire(self) -> None:
        event = AbortEvent(self)
        if self.onabort is not None:
            self.onabort(event)
        listeners, self._listeners = self._listeners, [e for e in self._listeners if not e[1]]
        for listener, _ in listeners:
            listener(event)


class AbortEvent:
    """What an abort listener gets: `type` 'abort' and the signal as `target`."""

    type = "abort"

    def __init__(self, target: AbortSignal) -> None:
        self.target = self.currentTarget = target


class AbortController:
    """Owns a signal; `abort(reason)` sets it once (later calls keep the first reason)."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: str | None = None) -> None:
        if not self.signal.aborted:
            self.signal._reason = reason
            self.signal._aborted.set()
            self.signal._fire()
