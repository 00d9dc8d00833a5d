"""Export and import of a queue on the engine, for migration between backends.

- `export_page`: jobs of every state in their line order (waiting as they would be taken,
  prioritized by priority then age, delayed by due time, active, waiting-children,
  completed and failed by finish time), with their logs, delayed due times and flow links.
- `import_page`: writes such a page idempotently by id. A job already there with the same
  name, data and timestamp is skipped; one that differs is refused unless `overwrite`. Active
  jobs arrive as waiting (their worker is gone). No events are emitted: a migration is not
  activity.
- `queue_meta` / `apply_meta`: everything about a queue that is not a job, as plain JSON
  values (the same shape on every backend), also used by the SQLite file for its queue rows.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any

from psyq.backends.base import STATE_ORDER, ExportPage, JobRecord, Limiter, NewJob, QueueMeta
from psyq.backends.engine.store import QueueStore
from psyq.errors import PsyqError

__all__ = [
    "EXPORT_ORDER",
    "apply_meta",
    "export_ids",
    "export_page",
    "import_page",
    "links",
    "place",
    "queue_meta",
    "restore_links",
]

# States whose jobs keep their place in a line as a rank (persisted stores write it).
RANKED = ("waiting", "prioritized", "completed", "failed")
# The order jobs leave a queue in an export (and arrive in the destination): a job's life.
EXPORT_ORDER = STATE_ORDER


# ---------------------------------------------------------------------- export
def export_ids(store: QueueStore) -> list[str]:
    """Every job id of the queue, in export order."""
    return [job_id for state in EXPORT_ORDER for job_id in store.ids_in(state, asc=True)]


def export_page(store: QueueStore, ids: list[str], start: int, limit: int) -> ExportPage:
    """The jobs of `ids[start:start+limit]` still in the store, as an export page."""
    page = ExportPage(jobs=[], logs={}, next_cursor=None)
    store.preload(ids[start : start + limit])
    for job_id in ids[start : start + limit]:
        record = store.jobs.get(job_id)
        if record is None:
            continue  # removed since the export began
        page.jobs.append(_copy(record))
        if job_id in store.logs:
            page.logs[job_id] = list(store.logs[job_id])
        delayed = store.delayed_key.get(job_id)
        if delayed is not None:
            page.due[job_id] = delayed[0]
        children = links(store, job_id)
        if children is not None:
            page.deps[job_id] = children
    if store.trim is not None:  # what the page read from the file need not stay
        store.trim()
    return page


# Every field of a record, in constructor order: building a copy positionally is about
# three times faster than dataclasses.replace, which counts on a page of 1000 jobs.
_FIELDS = attrgetter(*(item.name for item in fields(JobRecord)))


def _copy(record: JobRecord) -> JobRecord:
    """A copy the caller may change (own opts, no lock token)."""
    copied = JobRecord(*_FIELDS(record))
    copied.opts = dict(record.opts)
    copied.stacktrace = tuple(record.stacktrace)
    copied.lock_token = None
    return copied


def links(store: QueueStore, job_id: str) -> dict[str, Any] | None:
    """A parent's children: pending keys, and processed / failed / ignored values."""
    if job_id not in store.pending and not (
        job_id in store.processed or job_id in store.failed_children or job_id in store.ignored
    ):
        return None
    return {
        "pending": sorted(store.pending.get(job_id, ())),
        "processed": dict(store.processed.get(job_id, {})),
        "failed": dict(store.failed_children.get(job_id, {})),
        "ignored": dict(store.ignored.get(job_id, {})),
    }


# ---------------------------------------------------------------------- import
def import_page(store: QueueStore, page: ExportPage, overwrite: bool) -> int:
    """Write the page's jobs; returns how many were written (skipped ones are not)."""
    fresh = _check(store, page, overwrite)
    for record in fresh:
        old = store.jobs.get(record.id)
        if old is not None:
            store._drop(old)
        _import_one(store, record, page)
    return len(fresh)


def _check(store: QueueStore, page: ExportPage, overwrite: bool) -> list[JobRecord]:
    """The page's jobs to write; refuses (writing nothing) a different job under a taken id."""
    fresh = []
    store.preload([record.id for record in page.jobs])
    for record in page.jobs:
        if record.state not in EXPORT_ORDER:
            raise PsyqError(f"cannot import job {record.id!r}: unknown state {record.state!r}")
        old = store.jobs.get(record.id)
        if old is None or overwrite:
            fresh.append(record)
        elif (old.name, old.data, old.timestamp) != (record.name, record.data, record.timestamp):
            raise PsyqError(
                f"cannot import job {record.id!r} into {store.name!r}: a different job holds "
                "that id there (import with overwrite to replace it)"
            )
    return fresh


def _import_one(store: QueueStore, incoming: JobRecord, page: ExportPage) -> None:
    record = _copy(incoming)
    record.queue = store.name
    if record.state == "active" or record.state == "paused":
        record.state = "waiting"
    store.jobs[record.id] = record
    due = page.due.get(record.id, record.timestamp + record.delay)
    place(store, record, next(store.seq), due)
    if record.id in page.logs:
        store.logs[record.id] = list(page.logs[record.id])
    if record.id in page.deps:
        restore_links(store, record.id, page.deps[record.id])
    if record.id.isdigit():
        store.last_id = max(store.last_id, int(record.id))  # new ids never collide
    store.mark(record.id)


def place(store: QueueStore, record: JobRecord, rank: int, due: int | None) -> None:
    """Put a job in the structure of its state (rank: its place in its line)."""
    job_id, state = record.id, record.state
    if state in ("waiting", "prioritized", "delayed"):
        _place_in_line(store, record, rank, due)
    elif state == "active":
        store.active[job_id] = (record.lock_token or "", 0)  # expired: the stalled check
        if record.opts and "group" in record.opts:
            store.groups.started(record.opts["group"]["id"])
    elif state == "completed":
        store.completed.add(job_id)
    elif state == "failed":
        store.failed.add(job_id)
    elif state == "waiting-children":
        store.waiting_children[job_id] = None
    if state in RANKED and store.dirty is not None:
        store.rank[job_id] = rank


def _place_in_line(store: QueueStore, record: JobRecord, rank: int, due: int | None) -> None:
    job_id, state = record.id, record.state
    group = record.opts.get("group") if record.opts else None
    if state == "waiting" and group is not None:
        store.groups.push(group["id"], job_id, group.get("priority", 0), front=False)
    elif state == "waiting":
        store.wait.append(job_id)
    elif state == "prioritized":
        store.prio.push(record.priority, rank, job_id)
    else:
        key = (due or 0, rank, job_id)
        store.delayed.add(key)
        store.delayed_key[job_id] = key


def restore_links(store: QueueStore, job_id: str, children: Mapping[str, Any]) -> None:
    """A parent's children, as `export_page` gives them."""
    store.pending[job_id] = set(children["pending"])
    for name, target in (
        ("processed", store.processed),
        ("failed", store.failed_children),
        ("ignored", store.ignored),
    ):
        if children[name]:
            target[job_id] = dict(children[name])


# ---------------------------------------------------------------------- queue meta
def queue_meta(store: QueueStore) -> QueueMeta:
    """Everything about a queue that is not a job, as plain JSON values."""
    limiter = store.global_limiter
    return {
        "paused": store.paused,
        "last_id": store.last_id,
        "limited_until": store.limited_until,
        "global_limiter": None if limiter is None else [limiter.max, limiter.duration],
        "global_concurrency": store.global_concurrency,
        "dedup": {key: list(value) for key, value in store.dedup.items()},
        "schedulers": {key: _scheduler(entry) for key, entry in store.schedulers.items()},
        "max_len_events": store.events.max_len,
        "groups": copy.deepcopy(store.groups.settings),
    }


def _scheduler(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The neutral shape: the spec, template, iteration count, next run and pending job
    (the id is the key of the mapping; the name is the template's)."""
    template: NewJob = entry["template"]
    shown = {k: v for k, v in entry.items() if k not in ("key", "name")}
    shown["template"] = [template.name, template.data, template.opts, template.timestamp]
    return shown


def apply_meta(store: QueueStore, meta: QueueMeta) -> None:
    """Set what `queue_meta` gave (id counters only move up, so new ids never collide)."""
    store.paused = bool(meta["paused"])
    store.last_id = max(store.last_id, int(meta["last_id"]))
    store.limited_until = int(meta.get("limited_until") or 0)
    limiter = meta["global_limiter"]
    store.global_limiter = None if limiter is None else Limiter(*limiter)
    store.global_concurrency = meta["global_concurrency"]
    store.dedup.update({key: (value[0], value[1]) for key, value in meta["dedup"].items()})
    for key, entry in meta["schedulers"].items():
        name, data, opts, timestamp = entry["template"]
        template = NewJob(name, data, opts, timestamp)
        store.schedulers[key] = {"key": key, "name": name, **entry, "template": template}
    store.events.max_len = int(meta["max_len_events"])
    for gid, settings in meta.get("groups", {}).items():
        for name, value in settings.items():
            store.groups.set(gid, name, value)
    store.changed()
