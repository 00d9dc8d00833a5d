"""`EventLog`: a queue's bounded event feed (BullMQ's events stream, in memory).

An event has a sequence number (one more than the previous event of the queue), a time, a
name and its fields; its id is "<ms>-<seq>", so a reader resumes from any id it saw. The
oldest events go once `max_len` is passed (`maxLenEvents`, default 10,000).

Events are kept in parallel lists rather than a tuple each: a job's life writes several
events, and tuples would be garbage-collector work while lists of ints, strings and
string-only dicts are not. Ids are formatted only when read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psyq.errors import InvalidOptionsError

__all__ = ["DEFAULT_MAX_LEN_EVENTS", "EventLog", "parse_event_id"]

DEFAULT_MAX_LEN_EVENTS = 10_000


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


# Events whose one extra field travels as a bare string, and fields every such event has.
_STRING_FIELD = {"added": "name", "completed": "returnvalue", "progress": "data"}
_IMPLIED: dict[str, dict[str, str]] = {
    "active": {"prev": "waiting"},
    "completed": {"prev": "active"},
}

Extra = dict[str, Any] | str | None


class EventLog:
    __slots__ = ("_extra", "_first_seq", "_ids", "_ms", "_names", "fresh", "max_len", "waiters")

    def __init__(self, max_len: int = DEFAULT_MAX_LEN_EVENTS) -> None:
        self._ms: list[int] = []
        self._names: list[str] = []
        self._ids: list[str | None] = []
        self._extra: list[Extra] = []
        self._first_seq = 1  # sequence number of index 0 of the lists
        self.max_len = max_len
        self.waiters: set[asyncio.Future[None]] = set()
        self.fresh = False  # events were added since the readers were last woken

    def __len__(self) -> int:
        return len(self._ms) - self._hidden()

    def _hidden(self) -> int:
        """How many of the oldest entries are past `max_len` (dropped at the next trim)."""
        return max(0, len(self._ms) - self.max_len)

    @property
    def next_seq(self) -> int:
        return self._first_seq + len(self._ms)

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    def add(self, ms: int, event: str, job_id: str | None, extra: Extra) -> None:
        """Record an event; `extra` is its other fields, or for added/completed/progress
        the bare name/returnvalue/data string (no dict is built on the hot path)."""
        self.fresh = True
        self._ms.append(ms)
        self._names.append(event)
        self._ids.append(job_id)
        self._extra.append(extra)
        if len(self._ms) > 2 * self.max_len + 1024:  # trim rarely: O(1) per add on average
            self._trim()

    def _trim(self) -> None:
        drop = self._hidden()
        del self._ms[:drop], self._names[:drop], self._ids[:drop], self._extra[:drop]
        self._first_seq += drop

    def read(self, after_seq: int, count: int) -> list[tuple[str, str, dict[str, Any]]]:
        """Up to `count` events after `after_seq`, oldest first, as (id, event, fields)."""
        start = max(self._hidden(), after_seq + 1 - self._first_seq)
        stop = min(len(self._ms), start + count)
        return [self._entry(i) for i in range(start, stop)]

    def _entry(self, index: int) -> tuple[str, str, dict[str, Any]]:
        event, job_id, extra = self._names[index], self._ids[index], self._extra[index]
        fields: dict[str, Any] = {} if job_id is None else {"jobId": job_id}
        if isinstance(extra, str):
            fields[_STRING_FIELD[event]] = extra
        elif extra:
            fields.update(extra)
        fields.update(_IMPLIED.get(event, ()))
        return f"{self._ms[index]}-{self._first_seq + index}", event, fields

    def newest_id(self) -> str:
        """The newest event's id ("0" when the queue never had one). Its sequence number is
        all a reader needs, so a log whose events were all trimmed answers "0-<seq>"."""
        if self._ms:
            return f"{self._ms[-1]}-{self.last_seq}"
        return f"0-{self.last_seq}" if self.last_seq else "0"

    def set_max_len(self, max_len: int) -> None:
        self.max_len = max_len
        self._trim()
