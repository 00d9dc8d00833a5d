"""`FinishedLine`: the ids of one finished state (completed or failed) in finish order.

On memory:// every id is here. A store persisted to SQLite swaps in a line whose older ids
live only in the file (`psyq.backends.sqlite.resident.FileLine`); both answer the same
calls, so the engine's retention, clean, retry and paging read one interface.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

__all__ = ["FinishedLine"]


class FinishedLine:
    """Ids of one finished state, oldest first (the order they finished in)."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, job_id: str) -> None:
        self.ids[job_id] = None

    def remove(self, job_id: str) -> None:
        """Forget a job of this state (its record is in memory: it is being moved)."""
        del self.ids[job_id]

    def iterate(self, asc: bool) -> Iterator[str]:
        """Every id, oldest first when `asc`; the line may change while this is consumed."""
        ids = list(self.ids)
        return iter(ids if asc else ids[::-1])

    def oldest(self) -> str | None:
        return next(iter(self.ids), None)
