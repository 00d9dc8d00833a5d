"""`EventLog`: a queue's bounded event feed (BullMQ's events stream, in memory).

An event has a sequence number (one more than the previous event of the queue), a time, a
name and its fields; its id is "<ms>-<seq>", so a reader resumes from any id it saw. The
oldest events go once `max_len` is passed (`maxLenEvents`, default 10,000).

Ids are ordered as Redis stream ids are, by time then sequence number: an event's time is
never older than the previous event's (a clock that steps back repeats the last time). So
ids stay unique across a history that starts again, as a `memory://` server's does when it
restarts, or a buffered SQLite file's after a `kill -9` (its newest, uncommitted events are
gone and their numbers are given out again): a reader's id whose number is past this log's,
or names an event of another time, is not of this history, and the read starts at the
first event newer than its time, which is this history's start when the restart came later.

Events are kept in parallel lists rather than a tuple each: a job's life writes several
events, and tuples would be garbage-collector work while lists of ints, strings and
string-only dicts are not. Ids are formatted only when read.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, bisect_right
from typing import Any

from psyq.errors import InvalidOptionsError

__all__ = ["DEFAULT_MAX_LEN_EVENTS", "EventLog", "parse_event_id"]

DEFAULT_MAX_LEN_EVENTS = 10_000


Position = tuple[int | None, int]  # an id's time (None: a bare sequence number) and number


def parse_event_id(event_id: str, newest: Position) -> Position:
    """The id after which to read: "$" = `newest` (now), "0"/"0-0" = from the start."""
    if event_id == "$":
        return newest
    head, _, tail = event_id.partition("-")
    try:
        return (int(head), int(tail)) if tail else (None, int(head))
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

    @property
    def newest(self) -> Position:
        """The position of the newest event (a reader at "$")."""
        return (self._ms[-1] if self._ms else 0), self.last_seq

    def number_from(self, seq: int) -> None:
        """Give the next event number `seq` (a log with no events yet, such as the one of
        a queue made again after `obliterate`)."""
        if not self._ms:
            self._first_seq = max(self._first_seq, seq)

    def add(self, ms: int, event: str, job_id: str | None, extra: Extra) -> None:
        """Record an event; `extra` is its other fields, or for added/completed/progress
        the bare name/returnvalue/data string (no dict is built on the hot path)."""
        self.fresh = True
        times = self._ms
        if times and ms < times[-1]:
            ms = times[-1]  # ids stay ordered by time
        times.append(ms)
        self._names.append(event)
        self._ids.append(job_id)
        self._extra.append(extra)
        if len(self._ms) > 2 * self.max_len + 1024:  # trim rarely: O(1) per add on average
            self._trim()

    def _trim(self) -> None:
        drop = self._hidden()
        del self._ms[:drop], self._names[:drop], self._ids[:drop], self._extra[:drop]
        self._first_seq += drop

    def read(self, after: Position, count: int) -> list[tuple[str, str, dict[str, Any]]]:
        """Up to `count` events after the id `after`, oldest first, as (id, event, fields)."""
        start = self._start(*after)
        stop = min(len(self._ms), start + count)
        return [self._entry(i) for i in range(start, stop)]

    def _start(self, ms: int | None, seq: int) -> int:
        """The index of the first event after the id (ms, seq), among the kept ones."""
        hidden, index = self._hidden(), seq - self._first_seq
        if ms is None or index < 0:  # a bare number, or an event trimmed since
            return max(hidden, index + 1)
        times = self._ms
        if index < len(times) and times[index] == ms:  # an event of this history
            return max(hidden, index + 1)
        # Another history's id: the first event after it in (time, number) order.
        return max(hidden, bisect_left(times, ms), min(bisect_right(times, ms), index + 1))

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
