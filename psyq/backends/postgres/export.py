"""Export / import of a queue (what `psyq migrate` and the Spark pipeline use).

Pages follow the primary key (the cursor is the last id of a page). Import writes jobs
idempotently by id: a job already there is left alone unless `overwrite`. Active jobs
arrive waiting (no worker holds them here); flow links are rebuilt from the children's
`parent` option; the auto-id counter is raised past imported integer ids.
"""

from __future__ import annotations

import json
from typing import Any

from psyq.backends.base import ExportPage, JobRecord
from psyq.backends.postgres.records import to_record
from psyq.backends.postgres.tx import Tx, json_text, queue_of

__all__ = ["export_page", "import_page", "queue_meta", "set_queue_meta"]


async def export_page(tx: Tx, qkey: str, cursor: str | None, limit: int) -> ExportPage:
    rows = await tx.fetch("export_jobs.page", qkey, cursor or "", limit)
    jobs = [to_record(row) for row in rows]
    logs: dict[str, list[str]] = {}
    if jobs:
        for row in await tx.fetch("export_jobs.logs", qkey, [job.id for job in jobs]):
            logs.setdefault(row["job_id"], []).append(row["row"])
    next_cursor = jobs[-1].id if len(jobs) == limit else None
    return ExportPage(jobs, logs, next_cursor)


async def import_page(tx: Tx, qkey: str, page: ExportPage, overwrite: bool) -> int:
    ids = [job.id for job in page.jobs]
    present = (
        set()
        if overwrite
        else {row["id"] for row in await tx.fetch("export_jobs.existing_ids", qkey, ids)}
    )
    written = [job for job in page.jobs if job.id not in present]
    for job in written:
        await _write(tx, qkey, job)
        await tx.execute("export_jobs.replace_logs", qkey, job.id, page.logs.get(job.id, []))
        await _link(tx, qkey, job)
    numbers = [int(job.id) for job in written if job.id.isdigit()]
    if numbers:
        await tx.execute("export_jobs.raise_last_id", qkey, queue_of(qkey), max(numbers))
    return len(written)


async def _write(tx: Tx, qkey: str, job: JobRecord) -> None:
    state = "waiting" if job.state in (None, "active", "paused") else job.state
    if state == "waiting" and job.priority > 0:
        state = "prioritized"
    seq = int(await tx.fetchval("add_jobs.next_seqs", 1))
    due = job.timestamp + job.delay if state == "delayed" else None
    await tx.execute(
        "export_jobs.upsert",
        qkey,
        job.id,
        job.name,
        job.data,
        json_text(job.opts),
        job.timestamp,
        job.delay,
        job.priority,
        json_text(job.progress),
        job.attempts_made,
        job.attempts_started,
        job.stalled_counter,
        job.processed_on,
        job.finished_on,
        job.returnvalue,
        job.failed_reason,
        json_text(list(job.stacktrace)),
        job.parent_key,
        job.processed_by,
        state,
        seq,
        due,
    )
    if state in ("waiting", "prioritized"):
        tx.emit(qkey, "waiting", job.id)
        tx.wake(qkey)


async def _link(tx: Tx, qkey: str, job: JobRecord) -> None:
    parent = job.opts.get("parent")
    if not parent:
        return
    status, value = "pending", None
    if job.state == "completed":
        status, value = "processed", job.returnvalue or "null"
    elif job.state == "failed":
        value = job.failed_reason or ""
    child_key = f"{qkey}:{job.id}"
    await tx.execute("export_jobs.link", parent["queue"], parent["id"], child_key, status, value)


async def queue_meta(tx: Tx, qkey: str) -> dict[str, Any]:
    queue = await tx.fetchrow("common.queue", qkey)
    schedulers = await tx.fetch("schedulers.all", qkey)
    dedup = await tx.fetch("export_jobs.dedup_keys", qkey)
    limit = None
    if queue is not None and queue["global_max"] is not None:
        limit = {"max": queue["global_max"], "duration": queue["global_duration"]}
    return {
        "paused": bool(queue and queue["paused"]),
        "lastId": 0 if queue is None else queue["last_id"],
        "maxLenEvents": 10_000 if queue is None else queue["max_len_events"],
        "globalConcurrency": None if queue is None else queue["global_concurrency"],
        "globalRateLimit": limit,
        "schedulers": [_scheduler(row) for row in schedulers],
        "dedup": {r["dedup_id"]: {"jobId": r["job_id"], "expires": r["expires"]} for r in dedup},
    }


def _scheduler(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "spec": json.loads(row["spec"]),
        "name": row["template_name"],
        "data": row["template_data"],
        "opts": json.loads(row["template_opts"]),
        "iterationCount": row["iteration_count"],
        "next": row["next_ms"],
        "pending": row["pending"],
    }


async def set_queue_meta(tx: Tx, qkey: str, meta: dict[str, Any]) -> None:
    limit = meta.get("globalRateLimit") or {}
    await tx.execute(
        "export_jobs.set_meta",
        qkey,
        queue_of(qkey),
        bool(meta.get("paused", False)),
        int(meta.get("lastId", 0)),
        int(meta.get("maxLenEvents", 10_000)),
        meta.get("globalConcurrency"),
        limit.get("max"),
        limit.get("duration"),
    )
    for entry in meta.get("schedulers", []):
        await tx.execute(
            "export_jobs.scheduler_row",
            qkey,
            entry["id"],
            json_text(entry["spec"]),
            entry["name"],
            entry["data"],
            json_text(entry["opts"]),
            entry["iterationCount"],
            entry["next"],
            entry["pending"],
        )
    for dedup_id, entry in meta.get("dedup", {}).items():
        await tx.execute("add_jobs.dedup_set", qkey, dedup_id, entry["jobId"], entry["expires"])
