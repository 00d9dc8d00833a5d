"""Injectable time.

Stored timestamps (job.timestamp, due times, lock expiry, finishedOn) are read from a `Clock`.
Backends that share state between processes use the store's own clock; the engine
uses the clock it is given, so tests can replace it with a `ManualClock`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock", "system_clock"]


@runtime_checkable
class Clock(Protocol):
    """Milliseconds since the Unix epoch, plus a way to hear that time jumped."""

    def now_ms(self) -> int: ...

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever time moves other than by itself (a manual advance)."""


class SystemClock:
    """Wall-clock time. Time only moves by itself, so nobody is ever notified."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def subscribe(self, callback: Callable[[], None]) -> None:
        return None


class ManualClock:
    """A clock that moves only when told to; subscribers hear every move."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._subscribers: list[Callable[[], None]] = []

    def now_ms(self) -> int:
        return self._now

    def subscribe(self, callback: Callable[[], None]) -> None:
        self._subscribers.append(callback)

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"a clock cannot go back: advance({ms})")
        self._now += ms
        for callback in list(self._subscribers):
            callback()


system_clock = SystemClock()
