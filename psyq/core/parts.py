"""`PartContext`: what every part of a Worker sees of it (psyq.core.fetching, settling and
locks extend it with what each needs besides): the queue's name, the lock duration, and
its events."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["PartContext"]


class PartContext(Protocol):
    """The Worker as each of its parts sees it at the least."""

    @property
    def name(self) -> str:
        """The queue's name."""

    @property
    def lock_duration(self) -> int:
        """Ms a taken job's lock lasts unless renewed."""

    def emit(self, event: str, *args: Any) -> bool: ...
