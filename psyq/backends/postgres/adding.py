"""Adding jobs: one statement for the whole batch, through the layout's own functions
(add_jobs_bulk for independent jobs, add_flow when a job has a parent or a dedup key)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psyq.backends.base import ErrorCode, JobRecord, NewJob, raise_for_code
from psyq.backends.postgres.connection import LayoutCode
from psyq.backends.postgres.fastpath import FastPath
from psyq.backends.postgres.locks import entry_locks
from psyq.backends.postgres.readers import EventReaders
from psyq.backends.postgres.statements import Row, Statements
from psyq.errors import JobNotFoundError

__all__ = ["Adding", "new_record", "refuse"]


class Adding(FastPath, EventReaders):
    """Adds jobs (flows come in a later part)."""

    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        return await self._add_jobs(queue, jobs, None)

    async def add_jobs_in(
        self, transaction: object, queue: str, jobs: Sequence[NewJob]
    ) -> list[JobRecord]:
        """As add_jobs, on the application's transaction (transaction.py), always through
        the layout's functions: psyq's own insert fails on a queue with no id sequence yet,
        which would end the application's transaction."""
        async with self._in_transaction(transaction) as on:
            return await self._add_jobs(queue, jobs, on)

    async def _add_jobs(
        self, queue: str, jobs: Sequence[NewJob], on: Statements | None
    ) -> list[JobRecord]:
        """Add on the pool (`on` None) or on the application's transaction."""
        if not jobs:
            return []
        await self._store_default_policy(queue)  # the URL's events=, once per queue
        entries = [self._entry(queue, new) for new in jobs]
        # add_flow also announces a custom id that exists ("duplicated"); the bulk insert
        # skips it silently
        linked = any(entry["id"] or "parentId" in entry or "dedupId" in entry for entry in entries)
        try:
            # plain jobs: psyq's own insert (fastpath.py); None until the queue has ids
            rows = None if linked or on is not None else await self._add_plain(queue, entries)
            if rows is None:  # (psyq's insert trims the events itself, by the layout's rule)
                rows = await self._add_in_layout(queue, entries, linked, on or self)
        except LayoutCode as exc:
            refuse(entries[0], str(exc.code))
            raise
        self._made_waiting(queue)
        ids = [str(row["id"]) for row in rows]
        for entry, job_id in zip(entries, ids, strict=True):
            refuse(entry, job_id)
        now = int(rows[0]["now"]) if rows else 0
        records = [
            new_record(queue, job_id, new, now) for job_id, new in zip(ids, jobs, strict=True)
        ]
        custom = [r.id for r, new in zip(records, jobs, strict=True) if "jobId" in new.opts]
        if custom or linked:
            found = await (on or self)._rows("adding.records", queue, ids)
            stored = {row["id"]: row for row in found}
            records = [
                self._records(queue, [stored[r.id]])[0] if r.id in stored else r for r in records
            ]
        return records

    async def _add_in_layout(
        self, queue: str, entries: list[dict[str, Any]], linked: bool, on: Statements
    ) -> Sequence[Row]:
        """Add through the layout's add_job, add_flow or add_jobs_bulk."""
        given = json.dumps(entries)
        locks = entry_locks(entries)
        if len(entries) == 1:
            return await on._rows_in_order(locks, "adding.one", *_one(entries[0]))
        if linked:
            return await on._rows_in_order(locks, "adding.flow", given)
        rows = await on._rows("adding.bulk", queue, given)
        await on._rows("events.trim", queue)  # the bulk insert does not trim
        return rows

    def _entry(self, queue: str, new: NewJob) -> dict[str, Any]:
        """BullMQ's batch entry of one job (the layout's add functions read these keys)."""
        opts = new.opts
        entry: dict[str, Any] = {
            "queue": queue,
            "id": str(opts.get("jobId", "")),
            "name": new.name,
            "data": new.data,
            "opts": opts,
            "priority": opts.get("priority", 0),
            "delay": opts.get("delay", 0),
            "attempts": opts.get("attempts", 1),
            "lifo": bool(opts.get("lifo", False)),
        }
        if new.timestamp is not None:
            entry["timestamp"] = new.timestamp
        parent = opts.get("parent")
        if parent is not None:
            parent_queue = self._queue_name(str(parent["queue"]))
            entry["parentQueue"] = parent_queue
            entry["parentId"] = str(parent["id"])
            entry["parentKey"] = f"{parent_queue}:{parent['id']}"
        dedup = opts.get("deduplication")
        if dedup is not None:
            entry["dedupId"] = str(dedup["id"])
        return entry

    @staticmethod
    def _queue_name(queue_key: str) -> str:
        """A `parent` option's queue as the layout names it: `<queue>` (what Node BullMQ 6
        gives on Postgres), or `<prefix>:<queue>` as a program written for Redis gives it
        (queue names hold no ':')."""
        return queue_key.rpartition(":")[2]


def _one(entry: dict[str, Any]) -> list[Any]:
    """add_job's parameters for one batch entry (see adding.sql, `one`)."""
    return [
        entry["queue"],
        entry["id"],
        entry["name"],
        entry["data"],
        json.dumps(entry["opts"]),
        entry["priority"],
        entry["delay"],
        entry.get("timestamp"),
        entry["attempts"],
        entry.get("parentQueue"),
        entry.get("parentId"),
        entry.get("parentKey"),
        entry.get("dedupId"),
        entry["lifo"],
    ]


def refuse(entry: dict[str, Any], job_id: str) -> None:
    """Raise for an id that is a negative code (add_flow's refusals): -5 the parent is
    missing, -7 the job has another parent."""
    if not (job_id.startswith("-") and job_id[1:].isdigit()):
        return
    if int(job_id) == ErrorCode.PARENT_MISSING:
        raise JobNotFoundError(str(entry.get("parentQueue")), str(entry.get("parentId")))
    raise_for_code(int(job_id), entry["queue"], entry["id"], "add")


def new_record(queue: str, job_id: str, new: NewJob, now: int) -> JobRecord:
    """The record of a job just added (what the layout stored for it)."""
    opts = new.opts
    timestamp = new.timestamp if new.timestamp is not None else now
    delay = int(opts.get("delay", 0))
    priority = int(opts.get("priority", 0))
    state = "delayed" if delay > 0 else ("prioritized" if priority > 0 else "waiting")
    return JobRecord(
        id=job_id,
        queue=queue,
        name=new.name,
        data=new.data,
        opts=opts,
        timestamp=timestamp,
        delay=delay,
        priority=priority,
        state=state,
    )
