"""Job schedulers on the engine: exactly one pending job per scheduler.

The pending job has id `repeat:<schedulerId>:<millis>` and `opts["repeatJobKey"]`; when it
becomes active, the next one is created (delayed until its time). Upserting a scheduler
replaces its pending job; removing it removes the pending job too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from psyq.backends.base import JobRecord, NewJob, SchedulerEntry
from psyq.backends.engine.view import Adding
from psyq.rules.schedule import next_run, upserted_run

__all__ = ["create_next", "owns_pending_run", "remove", "upsert"]


def job_id(scheduler_id: str, millis: int) -> str:
    return f"repeat:{scheduler_id}:{millis}"


def upsert(
    store: Adding, scheduler_id: str, spec: Mapping[str, Any], template: NewJob, now: int
) -> JobRecord | None:
    """Create or replace a scheduler; returns its pending job (None when it has no runs)."""
    old = store.schedulers.get(scheduler_id)
    current_ms = None if old is None else _current_ms(store, old)
    replaced = old is not None and _drop_pending(store, old)
    millis = upserted_run(spec, now, old, current_ms, replaced)
    entry: dict[str, Any] = {
        "key": scheduler_id,
        "name": template.name,
        **spec,
        "template": template,
        "iterationCount": 0,
        "next": millis,
        "pending": None,
    }
    store.schedulers[scheduler_id] = entry
    store.changed()
    return None if millis is None else _add_run(store, entry, millis, now)


def _add_run(store: Adding, entry: dict[str, Any], millis: int, now: int) -> JobRecord:
    template: NewJob = entry["template"]
    opts = {
        **template.opts,
        "jobId": job_id(entry["key"], millis),
        "delay": max(0, millis - now),
        "repeatJobKey": entry["key"],
    }
    record = store.add(NewJob(template.name, template.data, opts, now), now)
    entry["iterationCount"] += 1
    entry["next"] = millis
    entry["pending"] = record.id
    return record


def _current_ms(store: Adding, entry: Mapping[str, Any]) -> int | None:
    """The time of the scheduler's current run: its pending one, else its last."""
    pending = store.jobs.get(entry["pending"] or "")
    return entry["next"] if pending is None else int(pending.id.rsplit(":", 1)[1])


def _drop_pending(store: Adding, entry: Mapping[str, Any]) -> bool:
    """Remove the scheduler's run not yet taken; whether there was one."""
    pending = store.jobs.get(entry["pending"] or "")
    if pending is not None and pending.state in ("delayed", "waiting", "prioritized"):
        store.remove_job(pending.id, remove_children=False)
        return True
    return False


def create_next(store: Adding, record: JobRecord, now: int) -> None:
    """The scheduler's pending job became active: create the following one."""
    entry = store.schedulers.get(record.opts["repeatJobKey"])
    if entry is None or entry["pending"] != record.id:
        return
    millis = next_run(entry, int(record.id.rsplit(":", 1)[1]), entry["iterationCount"], now)
    entry["pending"] = None
    entry["next"] = millis
    store.changed()
    if millis is not None:
        _add_run(store, entry, millis, now)


def owns_pending_run(store: Adding, job_id: str) -> bool:
    """Whether `job_id` is a scheduler's pending run, which only removing the scheduler
    removes (as in BullMQ, whose removeJob refuses it with error -8)."""
    record = store.jobs.get(job_id)
    if record is None or record.state not in ("delayed", "waiting", "prioritized"):
        return False
    entry = store.schedulers.get(record.opts.get("repeatJobKey") or "")
    return entry is not None and entry["pending"] == job_id


def remove(store: Adding, scheduler_id: str) -> bool:
    entry = store.schedulers.pop(scheduler_id, None)
    if entry is None:
        return False
    store.changed()
    _drop_pending(store, entry)
    return True


def describe(entry: Mapping[str, Any]) -> SchedulerEntry:
    """A scheduler as `get_job_scheduler` returns it (BullMQ's fields)."""
    template: NewJob = entry["template"]
    shown = {k: v for k, v in entry.items() if k not in ("template", "pending")}
    shown["template"] = {"data": template.data, "opts": template.opts}
    return cast(SchedulerEntry, shown)  # the entry's keys are the shape's
