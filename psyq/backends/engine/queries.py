"""`Queries`: what a queue's reads see (counts, ranges of jobs, logs); no changes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from itertools import islice
from typing import Any

from psyq.backends.base import JobRecord
from psyq.backends.engine.lines import FinishedLine
from psyq.backends.engine.state import StoreState
from psyq.errors import JobNotFoundError
from psyq.rules.slices import inclusive_slice, inclusive_stop

__all__ = ["Queries"]


class Queries(StoreState):
    """A queue's reads."""

    # ------------------------------------------------------------------ queries
    def record(self, job_id: str) -> JobRecord:
        record = self.jobs.get(job_id)
        if record is None:
            raise JobNotFoundError(self.name, job_id)
        return record

    def counts(self, states: Sequence[str]) -> dict[str, int]:
        return {state: self._count(state) for state in states}

    def _count(self, state: str) -> int:
        if state in ("waiting", "paused"):
            waiting = len(self.wait) + self.groups.waiting
            return waiting if self.paused == (state == "paused") else 0
        sizes: dict[str, Sized] = {
            "active": self.active,
            "completed": self.completed,
            "failed": self.failed,
            "delayed": self.delayed_key,
            "prioritized": self.prio,
            "waiting-children": self.waiting_children,
        }
        return len(sizes[state])

    def counts_per_priority(self, priorities: Sequence[int]) -> dict[str, int]:
        found: dict[int, int] = {}
        for priority, _, _ in self.prio.ordered():
            found[priority] = found.get(priority, 0) + 1
        found[0] = len(self.wait)
        return {str(p): found.get(p, 0) for p in priorities}

    def ids_in(self, state: str, asc: bool) -> list[str]:
        """Ids of the jobs in `state`, oldest (or next to run) first when `asc`."""
        return list(self.iterate_ids(state, asc))

    def iterate_ids(self, state: str, asc: bool) -> Iterator[str]:
        """`ids_in`, lazily: a finished line persisted to SQLite is read page by page."""
        if state in ("completed", "failed"):
            return self._finished(state).iterate(asc)
        if state in ("waiting", "paused"):
            ids = self._waiting_ids() if self.paused == (state == "paused") else []
        elif state == "prioritized":
            ids = [entry[2] for entry in self.prio.ordered()]
        elif state == "delayed":
            ids = [entry[2] for entry in self.delayed]
        else:
            ids = list(self._ordered_dict(state))
        return iter(ids if asc else ids[::-1])

    def _waiting_ids(self) -> list[str]:
        """Plain waiting jobs, then each group's, groups by id (grouped jobs count as
        waiting; the order across groups is the ring's, not shown here)."""
        ids = list(self.wait)
        groups = self.groups
        if groups:
            for gid in sorted(groups.groups):
                ids.extend(groups.groups[gid].ordered())
        return ids

    def _finished(self, state: str) -> FinishedLine:
        return self.completed if state == "completed" else self.failed

    def _ordered_dict(self, state: str) -> dict[str, Any]:
        named: dict[str, dict[str, Any]] = {
            "active": self.active,
            "waiting-children": self.waiting_children,
        }
        return named[state]

    def get_jobs(self, states: Sequence[str], start: int, end: int, asc: bool) -> list[JobRecord]:
        """Jobs `start` to `end` (inclusive; -1: the last) of `states`, one after another."""
        ids: list[str] = []
        stop = inclusive_stop(end)
        for state in states:
            if stop is not None and stop <= 0:
                break
            size = self._count(state)
            if start < size:
                ids += islice(self.iterate_ids(state, asc), start, stop)
            start = max(0, start - size)
            stop = None if stop is None else stop - size
        return self.peek(ids)

    def get_logs(self, job_id: str, start: int, end: int, asc: bool) -> tuple[list[str], int]:
        self.jobs.get(job_id)  # in memory with its logs, if it was only in the file
        rows = self.logs.get(job_id, [])
        ordered = rows if asc else rows[::-1]
        return inclusive_slice(ordered, start, end), len(rows)
