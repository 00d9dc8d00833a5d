"""Between the engine's stores and SQLite rows: snapshots to write, and the rebuild of
stores from rows on open."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, cast

import msgpack

from psyq.backends.base import JobRecord, QueueMeta
from psyq.backends.engine import transfer
from psyq.backends.engine.store import QueueStore
from psyq.rules import codec

__all__ = [
    "BODY",
    "JOB_COLUMNS",
    "UPSERT_JOB",
    "body_record",
    "event_chunk",
    "job_record",
    "job_row",
    "queue_keys",
    "queue_meta",
    "restore_events",
    "restore_meta",
    "unstorable",
]

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode  # for rare shapes
# Queue settings and event chunks hold many jobs' names and ids: written as ASCII (escapes
# for the rest), so no one value can stop a queue's settings or events from being written.
_ascii_dumps = json.JSONEncoder(separators=(",", ":")).encode
_INT64 = (-(2**63), 2**63 - 1)

# Columns the engine orders or filters by, then the rest of the record as one MessagePack
# array (`BODY`): a narrow row binds 10 values instead of 26, which halves the write cost.
JOB_COLUMNS = "queue, id, state, rank, due, finished_on, body, deps, logs, priority, grp"
BODY = (
    "name, data, opts, timestamp, delay, priority, progress, attempts_made, attempts_started, "
    "stalled_counter, processed_on, returnvalue, failed_reason, stacktrace, parent_key, "
    "processed_by, lock_token"
)  # JSON-valued fields (opts, progress, stacktrace) are stored as JSON text inside it

Row = tuple[Any, ...]

UPSERT_JOB = f"INSERT OR REPLACE INTO jobs ({JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_pack = msgpack.Packer(use_bin_type=True).pack


def job_row(store: QueueStore, record: JobRecord) -> Row:
    job_id = record.id
    delayed = store.delayed_key.get(job_id)
    opts, progress, stack = record.opts, record.progress, record.stacktrace
    body = _pack(
        (
            record.name,
            record.data,
            _dumps(opts) if opts else "{}",
            record.timestamp,
            record.delay,
            record.priority,
            "0" if progress == 0 and type(progress) is int else _dumps(progress),
            record.attempts_made,
            record.attempts_started,
            record.stalled_counter,
            record.processed_on,
            record.returnvalue,
            record.failed_reason,
            _dumps(list(stack)) if stack else "[]",
            record.parent_key,
            record.processed_by,
            record.lock_token,
        )
    )
    return (
        store.key,
        job_id,
        record.state,
        delayed[1] if delayed else store.rank.get(job_id),
        delayed[0] if delayed else None,
        record.finished_on,
        body,
        _deps(store, job_id) if store.pending else None,
        _dumps(store.logs[job_id]) if job_id in store.logs else None,
        *_line_of(record, opts),
    )


def _line_of(record: JobRecord, opts: dict[str, Any]) -> tuple[int, str | None]:
    """The row's priority and group: a grouped job's priority is its group priority."""
    group = opts.get("group") if opts else None
    if group is None:
        return record.priority, None
    return group.get("priority", 0), group["id"]


def unstorable(row: Row) -> str | None:
    """None when SQLite can hold every value of `row`, else what it cannot hold."""
    for value in row:
        if type(value) is str:
            if not value.isascii() and codec.bad_unicode(value) is not None:
                return f"text with a lone surrogate: {value[:200]!r}"
        elif type(value) is int and not _INT64[0] <= value <= _INT64[1]:
            return f"an integer past int64: {value}"
    return None


def _deps(store: QueueStore, job_id: str) -> str | None:
    links = transfer.links(store, job_id)
    return None if links is None else _dumps(links)


_FIRST_QUEUE = "SELECT queue FROM jobs ORDER BY queue LIMIT 1"
_NEXT_QUEUE = "SELECT queue FROM jobs WHERE queue > ? ORDER BY queue LIMIT 1"


def queue_keys(conn: sqlite3.Connection) -> list[str]:
    """Every queue key of the jobs table, one index seek per queue (not a scan)."""
    found: list[str] = []
    row = conn.execute(_FIRST_QUEUE).fetchone()
    while row is not None:
        found.append(row[0])
        row = conn.execute(_NEXT_QUEUE, (row[0],)).fetchone()
    return found


def queue_meta(store: QueueStore) -> str:
    """Everything about a queue that is not a job, as JSON."""
    return _ascii_dumps(transfer.queue_meta(store))


def restore_meta(store: QueueStore, meta: dict[str, Any]) -> None:
    """Apply a queue's meta as the file keeps it (JSON of `transfer.queue_meta`)."""
    transfer.apply_meta(store, cast(QueueMeta, meta))


_options = codec.options_parser(json.loads)


def job_record(queue: str, row: Sequence[Any]) -> JobRecord:
    """The record of one job row (`JOB_COLUMNS`) of queue `queue`."""
    job_id, state, finished_on, body = row[1], row[2], row[5], row[6]
    return body_record(queue, job_id, state, finished_on, body)


def body_record(
    queue: str, job_id: str, state: str, finished_on: int | None, body: bytes, locked: bool = True
) -> JobRecord:
    """The record of a job from its row's id, state, finish time and `BODY`; `locked=False`
    leaves the lock token out (an export: a lock never moves)."""
    (
        name, data, opts, timestamp, delay, priority, progress, attempts_made,
        attempts_started, stalled_counter, processed_on, returnvalue, failed_reason,
        stacktrace, parent_key, processed_by, lock_token,
    ) = msgpack.unpackb(body)  # fmt: skip
    # The common "{}", "0" and "[]" skip json.loads (a file opens about 25% faster), and
    # options texts many jobs share are parsed once.
    return JobRecord(
        job_id, queue, name, data, _options(opts), timestamp,
        delay, priority, 0 if progress == "0" else json.loads(progress), attempts_made,
        attempts_started, stalled_counter, processed_on, finished_on, returnvalue,
        failed_reason, () if stacktrace == "[]" else tuple(json.loads(stacktrace)), parent_key,
        processed_by, lock_token if locked else None, state,
    )  # fmt: skip


def restore_events(store: QueueStore, chunks: Iterable[Sequence[Any]], next_seq: int) -> None:
    """Refill the event log from its newest chunks (oldest first), keeping `max_len`."""
    log = store.events
    entries = [entry for _first, body in chunks for entry in json.loads(body)]
    entries = entries[-log.max_len :] if log.max_len else []
    log._first_seq = next_seq - len(entries)
    for ms, name, job_id, extra in entries:
        log._ms.append(ms)
        log._names.append(name)
        log._ids.append(job_id)
        log._extra.append(extra)


def event_chunk(store: QueueStore, after_seq: int) -> Row:
    """One row holding every event after `after_seq` still in the log, as a JSON list."""
    log = store.events
    start = max(log._hidden(), after_seq + 1 - log._first_seq)
    stop = len(log._ms)
    body = list(zip(log._ms[start:stop], log._names[start:stop], log._ids[start:stop],
                    log._extra[start:stop], strict=True))  # fmt: skip
    return (store.key, log._first_seq + start, log._first_seq + stop - 1, _ascii_dumps(body))
