"""Between the native engine's stores and SQLite rows: snapshots to write, and the rebuild of
stores from rows on open."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

import msgpack

from psyq.backends.base import JobRecord, Limiter, NewJob
from psyq.backends.native.store import QueueStore

__all__ = [
    "BODY",
    "JOB_COLUMNS",
    "ORDER_BY",
    "UPSERT_JOB",
    "event_chunk",
    "job_row",
    "queue_meta",
    "restart_counters",
    "restore_events",
    "restore_job",
    "restore_meta",
]

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode  # for rare shapes

# Columns the engine orders or filters by, then the rest of the record as one MessagePack
# array (`BODY`): a narrow row binds 9 values instead of 25, which halves the write cost.
JOB_COLUMNS = "queue, id, state, rank, due, finished_on, body, deps, logs"
BODY = (
    "name, data, opts, timestamp, delay, priority, progress, attempts_made, attempts_started, "
    "stalled_counter, processed_on, returnvalue, failed_reason, stacktrace, parent_key, "
    "processed_by, lock_token"
)  # JSON-valued fields (opts, progress, stacktrace) are stored as JSON text inside it

Row = tuple[Any, ...]

UPSERT_JOB = f"INSERT OR REPLACE INTO jobs ({JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
    )


def _deps(store: QueueStore, job_id: str) -> str | None:
    links = {
        "pending": sorted(store.pending.get(job_id, ())),
        "processed": store.processed.get(job_id),
        "failed": store.failed_children.get(job_id),
        "ignored": store.ignored.get(job_id),
    }
    if not any(links.values()) and job_id not in store.pending:
        return None
    return _dumps(links)


def queue_meta(store: QueueStore) -> str:
    """Everything about a queue that is not a job, as JSON."""
    limiter = store.global_limiter
    return _dumps(
        {
            "paused": store.paused,
            "last_id": store.last_id,
            "limited_until": store.limited_until,
            "global_limiter": None if limiter is None else [limiter.max, limiter.duration],
            "global_concurrency": store.global_concurrency,
            "dedup": store.dedup,
            "schedulers": {key: _scheduler(entry) for key, entry in store.schedulers.items()},
            "max_len_events": store.events.max_len,
        }
    )


def _scheduler(entry: dict[str, Any]) -> dict[str, Any]:
    template: NewJob = entry["template"]
    shown = dict(entry)
    shown["template"] = [template.name, template.data, template.opts, template.timestamp]
    return shown


def restore_meta(store: QueueStore, meta: dict[str, Any]) -> None:
    store.paused = meta["paused"]
    store.last_id = meta["last_id"]
    store.limited_until = meta["limited_until"]
    limiter = meta["global_limiter"]
    store.global_limiter = None if limiter is None else Limiter(*limiter)
    store.global_concurrency = meta["global_concurrency"]
    store.dedup = {key: (value[0], value[1]) for key, value in meta["dedup"].items()}
    for key, entry in meta["schedulers"].items():
        name, data, opts, timestamp = entry["template"]
        store.schedulers[key] = {**entry, "template": NewJob(name, data, opts, timestamp)}
    store.events.max_len = meta["max_len_events"]


def restore_job(store: QueueStore, row: Sequence[Any]) -> None:
    """Put one job row back in its store (rows come in `ORDER_BY` order)."""
    _queue, job_id, state, rank, due, finished_on, body, deps, logs = row
    (
        name, data, opts, timestamp, delay, priority, progress, attempts_made,
        attempts_started, stalled_counter, processed_on, returnvalue, failed_reason,
        stacktrace, parent_key, processed_by, lock_token,
    ) = msgpack.unpackb(body)  # fmt: skip
    record = JobRecord(
        job_id, store.name, name, data, json.loads(opts), timestamp, delay, priority,
        json.loads(progress), attempts_made, attempts_started, stalled_counter, processed_on,
        finished_on, returnvalue, failed_reason, tuple(json.loads(stacktrace)), parent_key,
        processed_by, lock_token, state,
    )  # fmt: skip
    store.jobs[job_id] = record
    _place(store, record, rank, due)
    if deps is not None:
        _restore_deps(store, job_id, json.loads(deps))
    if logs is not None:
        store.logs[job_id] = json.loads(logs)


def _place(store: QueueStore, record: JobRecord, rank: int | None, due: int | None) -> None:
    job_id, state = record.id, record.state
    if state == "waiting":
        store.wait.append(job_id)  # rows come sorted by rank
        store.rank[job_id] = rank or 0
    elif state == "prioritized":
        store.prio.push(record.priority, rank or 0, job_id)
        store.rank[job_id] = rank or 0
    elif state == "delayed":
        key = (due or 0, rank or 0, job_id)
        store.delayed.add(key)
        store.delayed_key[job_id] = key
    elif state == "active":
        store.active[job_id] = (record.lock_token or "", 0)  # expired: the stalled check
    elif state == "completed":
        store.completed[job_id] = None
    elif state == "failed":
        store.failed[job_id] = None
    elif state == "waiting-children":
        store.waiting_children[job_id] = None


def _restore_deps(store: QueueStore, job_id: str, links: dict[str, Any]) -> None:
    store.pending[job_id] = set(links["pending"])
    for name, target in (
        ("processed", store.processed),
        ("failed", store.failed_children),
        ("ignored", store.ignored),
    ):
        if links[name]:
            target[job_id] = links[name]


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


def restart_counters(store: QueueStore) -> None:
    """After a rebuild, new sequence numbers continue above every rank in use."""
    ranks = [abs(rank) for rank in store.rank.values()]
    ranks += [key[1] for key in store.delayed_key.values()]
    store.seq = itertools.count(max(ranks, default=0) + 1)


# Waiting jobs by their rank, finished jobs by finish time: each line comes back in order.
ORDER_BY = "ORDER BY queue, rank, finished_on, id"


def event_chunk(store: QueueStore, after_seq: int) -> Row:
    """One row holding every event after `after_seq` still in the log, as a JSON list."""
    log = store.events
    start = max(log._hidden(), after_seq + 1 - log._first_seq)
    stop = len(log._ms)
    body = list(zip(log._ms[start:stop], log._names[start:stop], log._ids[start:stop],
                    log._extra[start:stop], strict=True))  # fmt: skip
    return (store.key, log._first_seq + start, log._first_seq + stop - 1, _dumps(body))
