"""Adds over psyq:// (protocol versions 2, 3 and 6): many callers' adds in one request,
plain answers; one job in the shortest request (version 3 without options, 6 with them).

    request   {"id": int, "op": "add_batch", "args": [[[queue, [job, ...]], ...]]}
              job = [name, data, opts, timestamp or None]   (a NewJob's fields, no ext type)
    answer    {"id": int, "ok": [group result, ...]}, one per group, in order:
              a list with one entry per job, or the psyq error that refused the group
              entry = [id, timestamp, state] when the job's record is exactly what
              `rebuild_all` makes of the job sent and those three values; else the JobRecord

    request   {"id": int, "op": "add", "args": [queue, name, data]}      (version 3)
              {"id": int, "op": "add", "args": [queue, name, data, opts]}    (version 6)
              one job, stamped with the server's time: what a lone `queue.add(name,
              data)` sends (version 6: also with options, such as a grouped add's
              `{"group": {"id": ...}}`, which add_batch's nesting cost ~16 Python calls
              more a job, at both ends, than a plain add)
    answer    {"id": int, "ok": entry}, the entry of that one job (as above)

Each group is one `add_jobs` call on the server: atomic on its own, failing on its own, so a
caller whose add was refused gets its error and the other callers of the batch their jobs.

The client collects the `add_jobs` calls of one event-loop turn into one request
(`AddBatch`), framed when the connection writes at the end of that turn, as every request
is: a lone add leaves exactly when it left before. Answers carry ids, not whole records:
the client already holds what it sent, and `rebuild_all` gives the record the server would
have sent, so a bulk add's reply is a few bytes per job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from psyq.backends.base import JobRecord, NewJob
from psyq.backends.server.protocol import ADD_WITH_OPTIONS, ProtocolError
from psyq.errors import PsyqError

__all__ = [
    "AddBatch",
    "compact",
    "compact_one",
    "job_fields",
    "parse_groups",
    "parse_one",
    "rebuild_all",
    "rebuildable",
]

job_fields = attrgetter("name", "data", "opts", "timestamp")  # a NewJob as a plain array


# The fields `rebuild_all` leaves at their defaults, and those defaults.
_REST = attrgetter(
    "progress",
    "attempts_made",
    "attempts_started",
    "stalled_counter",
    "processed_on",
    "finished_on",
    "returnvalue",
    "failed_reason",
    "stacktrace",
    "parent_key",
    "processed_by",
    "lock_token",
)
_DEFAULTS = _REST(JobRecord("", "", "", "", {}, 0))
_NONE = (0, 0)  # delay and priority of a job without options


def rebuildable(queue: str, new: NewJob, record: JobRecord) -> bool:
    """True when `rebuild_all(queue, [new], [[id, timestamp, state]])` gives `record` (the same
    test as comparing the two records, field by field, without building one)."""
    opts = new.opts
    return (
        record.name == new.name
        and record.data == new.data
        and record.opts == opts
        and record.queue == queue
        and type(record.progress) is int
        and _REST(record) == _DEFAULTS
        and record.delay == (opts.get("delay", 0) if opts else 0)
        and record.priority == (opts.get("priority", 0) if opts else 0)
    )


def compact(queue: str, jobs: Sequence[NewJob], records: list[JobRecord]) -> list[Any]:
    """The answer entries of a group: [id, timestamp, state] where the client can rebuild
    the very same record from it, the whole record where it cannot (a duplicate, a child
    of a flow, a record changed before the answer)."""
    return [_entry(queue, new, record) for new, record in zip(jobs, records, strict=True)]


def compact_one(queue: str, new: NewJob, records: list[JobRecord]) -> Any:
    """The answer entry of an `add` request (see `compact`)."""
    [record] = records
    if rebuildable(queue, new, record):  # _entry's work inline: one call fewer per add
        return [record.id, record.timestamp, record.state]
    return record


def _entry(queue: str, new: NewJob, record: JobRecord) -> Any:
    if rebuildable(queue, new, record):
        return [record.id, record.timestamp, record.state]
    return record


def rebuild_all(queue: str, jobs: Sequence[NewJob], entries: Any) -> list[JobRecord]:
    """The records of a group's answer entries, or ProtocolError naming a bad one. An entry
    [id, timestamp, state] is the record of the job sent with those three values, its delay
    and priority from its options, the other fields at their defaults, and a fresh list as
    `stacktrace` (what decoding a whole record gives)."""
    if type(entries) is not list or len(entries) != len(jobs):
        raise ProtocolError(f"add_batch: expected {len(jobs)} entries, got {entries!r:.80}")
    records: list[JobRecord] = []
    for new, entry in zip(jobs, entries, strict=True):
        if type(entry) is list and len(entry) == 3 and type(entry[0]) is str:
            id_, timestamp, state = entry
            if type(timestamp) is int and (state is None or type(state) is str):
                opts = new.opts
                delay, priority = (opts.get("delay", 0), opts.get("priority", 0)) if opts else _NONE
                records.append(
                    JobRecord(  # every field by position: keywords cost twice as much here
                        id_, queue, new.name, new.data, opts, timestamp, delay, priority,
                        0, 0, 0, 0, None, None, None, None, [], None, None, None, state,
                    )
                )  # fmt: skip
                continue
        elif type(entry) is JobRecord:
            records.append(entry)
            continue
        raise ProtocolError(f"add_batch: bad entry {entry!r:.80}")
    return records


def parse_groups(args: Any) -> list[tuple[str, list[NewJob]]]:
    """The groups of an add_batch request, or ProtocolError naming the first bad value."""
    if type(args) is not list or len(args) != 1 or type(args[0]) is not list:
        raise ProtocolError(f"add_batch takes one argument, a list of groups, got {args!r:.80}")
    groups: list[tuple[str, list[NewJob]]] = []
    for group in args[0]:
        if type(group) is not list or len(group) != 2 or type(group[0]) is not str:
            raise ProtocolError(f"add_batch: a group is [queue, jobs], got {group!r:.80}")
        queue, jobs = group
        if type(jobs) is not list:
            raise ProtocolError(f"add_batch: the jobs of {queue!r:.40} must be a list")
        groups.append((queue, [_new_job(job) for job in jobs]))
    return groups


def parse_one(args: Any, with_options: bool = False) -> tuple[str, NewJob]:
    """The queue and job of an `add` request, or ProtocolError naming the bad value
    (`with_options`: version 6, where [queue, name, data, opts] is one too)."""
    if type(args) is list:
        if len(args) == 3:
            queue, name, data = args
            if type(queue) is str and type(name) is str and type(data) is str:
                return queue, NewJob(name, data, {})
        elif len(args) == 4 and with_options:
            queue, name, data, opts = args
            if (
                type(queue) is str
                and type(name) is str
                and type(data) is str
                and type(opts) is dict
            ):
                return queue, NewJob(name, data, opts)
    if with_options:
        raise ProtocolError(
            f"add takes [queue, name, data] (all text) or [queue, name, data, opts] (opts a "
            f"map), got {args!r:.80}"
        )
    raise ProtocolError(f"add takes [queue, name, data] (all text), got {args!r:.80}")


def _new_job(fields: Any) -> NewJob:
    if type(fields) is list and len(fields) == 4:
        name, data, opts, timestamp = fields
        if (
            type(name) is str
            and type(data) is str
            and type(opts) is dict
            and (timestamp is None or type(timestamp) is int)
        ):
            return NewJob(name, data, opts, timestamp)
    raise ProtocolError(
        f"add_batch: a job is [name, data, opts, timestamp or None], got {fields!r:.80}"
    )


class AddBatch:
    """The add_jobs calls of one event-loop turn on one connection, sent as one request.
    It stands in the connection's table of pending answers as a future does."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.calls: list[tuple[str, list[NewJob], asyncio.Future[list[JobRecord]]]] = []
        self._loop = loop
        self.one = False  # sent as an `add` request: the answer is one entry

    def one_args(self, version: int) -> list[Any] | None:
        """The args of an `add` request when the batch is one job without a timestamp and
        the connection speaks `version` (3: without options; 6: with them too), else None."""
        calls = self.calls
        if len(calls) == 1:
            queue, jobs, _ = calls[0]
            if len(jobs) == 1:
                new = jobs[0]
                if new.timestamp is None:
                    if not new.opts:
                        return [queue, new.name, new.data]
                    if version >= ADD_WITH_OPTIONS:
                        return [queue, new.name, new.data, new.opts]
        return None

    def add(self, queue: str, jobs: list[NewJob]) -> asyncio.Future[list[JobRecord]]:
        future: asyncio.Future[list[JobRecord]] = self._loop.create_future()
        self.calls.append((queue, jobs, future))
        return future

    def args(self) -> list[Any]:
        return [[[queue, [job_fields(job) for job in jobs]] for queue, jobs, _ in self.calls]]

    def done(self) -> bool:
        for _, _, future in self.calls:  # noqa: SIM110 (no generator per add, as all() has)
            if not future.done():
                return False
        return True

    def set_result(self, results: Any) -> None:
        """Give each caller its records or its error."""
        calls = self.calls
        if self.one:  # the answer to an `add` request: the entry of its one job
            queue, jobs, future = calls[0]
            if not future.done():  # else the caller was cancelled
                try:
                    future.set_result(rebuild_all(queue, jobs, [results]))
                except ProtocolError as exc:
                    future.set_exception(exc)
            return
        if type(results) is not list or len(results) != len(calls):
            bad = ProtocolError(f"add_batch: expected {len(calls)} results, got {results!r:.80}")
            self.set_exception(bad)
            return
        for (queue, jobs, future), result in zip(calls, results, strict=True):
            if future.done():
                continue  # the caller was cancelled
            if isinstance(result, PsyqError):
                future.set_exception(result)
                continue
            try:
                future.set_result(rebuild_all(queue, jobs, result))
            except ProtocolError as exc:
                future.set_exception(exc)

    def set_exception(self, error: BaseException) -> None:
        for _, _, future in self.calls:
            if not future.done():
                future.set_exception(error)
