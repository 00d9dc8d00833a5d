"""A 4-ary min-heap with lazy deletion, for prioritized jobs.

Entries are `(priority, seq, job_id)`. Removing a job only forgets its live `seq`; the stale
entry is skipped when it reaches the top, and the heap is rebuilt when stale entries
outnumber live ones. A 4-ary heap is shallower than a binary one, so pushes and pops touch
fewer levels.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["Heap4"]

Entry = tuple[int, int, str]


class Heap4:
    """Min-heap of (priority, seq, id) with O(1) removal by id."""

    __slots__ = ("_items", "_live")

    def __init__(self) -> None:
        self._items: list[Entry] = []
        self._live: dict[str, int] = {}  # id -> seq of its live entry

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._live

    def push(self, priority: int, seq: int, job_id: str) -> None:
        """Add `job_id` (replacing an earlier entry of the same id)."""
        self._live[job_id] = seq
        items = self._items
        items.append((priority, seq, job_id))
        self._sift_up(len(items) - 1)

    def discard(self, job_id: str) -> bool:
        """Forget `job_id`; True when it was there."""
        if self._live.pop(job_id, None) is None:
            return False
        if len(self._items) > 2 * len(self._live) + 64:
            self._rebuild()
        return True

    def pop(self) -> str | None:
        """Remove and return the id with the lowest (priority, seq); None when empty."""
        items, live = self._items, self._live
        while items:
            _, seq, job_id = self._pop_top()
            if live.get(job_id) == seq:
                del live[job_id]
                return job_id
        return None

    def ordered(self) -> list[Entry]:
        """The live entries, lowest first (for queries, not for the hot path)."""
        return sorted(self._live_entries())

    def clear(self) -> None:
        self._items.clear()
        self._live.clear()

    def _live_entries(self) -> Iterator[Entry]:
        live = self._live
        return (entry for entry in self._items if live.get(entry[2]) == entry[1])

    def _rebuild(self) -> None:
        self._items = list(self._live_entries())
        for index in range((len(self._items) - 2) // 4, -1, -1):
            self._sift_down(index)

    def _pop_top(self) -> Entry:
        items = self._items
        last = items.pop()
        if not items:
            return last
        top = items[0]
        items[0] = last
        self._sift_down(0)
        return top

    def _sift_up(self, index: int) -> None:
        items = self._items
        entry = items[index]
        while index > 0:
            parent = (index - 1) >> 2
            if items[parent] <= entry:
                break
            items[index] = items[parent]
            index = parent
        items[index] = entry

    def _sift_down(self, index: int) -> None:
        items = self._items
        size = len(items)
        entry = items[index]
        while True:
            first = 4 * index + 1
            if first >= size:
                break
            best = first
            for child in range(first + 1, min(first + 4, size)):
                if items[child] < items[best]:
                    best = child
            if entry <= items[best]:
                break
            items[index] = items[best]
            index = best
        items[index] = entry
