"""`EventLog`: a queue's bounded event feed (BullMQ's events stream, in memory).

Entries are (seq, ms, event, fields). An id is "<ms>-<seq>"; `seq` increases by one per
event of the queue, so a reader resumes from any id it saw. The oldest entries go once
`max_len` is passed (`maxLenEvents`, default 10,000). Ids are formatted only when read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psyq.errors import InvalidOptionsError

__all__ = ["DEFAULT_MAX_LEN_EVENTS", "EventLog", "parse_event_id"]

DEFAULT_MAX_LEN_EVENTS = 10_000

Entry = tuple[int, int, str, dict[str, Any]]


def parse_event_id(event_id: str, last_seq: int) -> int:
    """The sequence number after which to read: "$" = now, "0"/"0-0" = from the start."""
    if event_id == "$":
        return last_seq
    head, _, tail = event_id.partition("-")
    try:
        return int(tail) if tail else int(head)
    except ValueError:
        raise InvalidOptionsError(
            f"event id must be '$', '0' or an id like '1700000000000-5', got {event_id!r}",
            option="last_event_id",
        ) from None


class EventLog:
    __slots__ = ("_head", "_items", "max_len", "next_seq", "waiters")

    def __init__(self, max_len: int = DEFAULT_MAX_LEN_EVENTS) -> None:
        self._items: list[Entry] = []
        self._head = 0  # index of the oldest kept entry
        self.next_seq = 1
        self.max_len = max_len
        self.waiters: set[asyncio.Future[None]] = set()

    def __len__(self) -> int:
        return len(self._items) - self._head

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    def add(self, ms: int, event: str, fields: dict[str, Any]) -> None:
        self._items.append((self.next_seq, ms, event, fields))
        self.next_seq += 1
        if len(self._items) - self._head > self.max_len:
            self._trim()

    def _trim(self) -> None:
        self._head = len(self._items) - self.max_len
        if self._head > max(1024, self.max_len):
            del self._items[: self._head]
            self._head = 0

    def read(self, after_seq: int, count: int) -> list[tuple[str, str, dict[str, Any]]]:
        """Up to `count` events after `after_seq`, oldest first, as (id, event, fields)."""
        first = self._items[self._head][0] if len(self) else self.next_seq
        start = self._head + max(0, after_seq + 1 - first)
        chosen = self._items[start : start + count]
        return [(f"{ms}-{seq}", event, fields) for seq, ms, event, fields in chosen]

    def set_max_len(self, max_len: int) -> None:
        self.max_len = max_len
        if len(self) > max_len:
            self._trim()
