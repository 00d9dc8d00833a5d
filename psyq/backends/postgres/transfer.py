"""Export / import pages (psyq migrate, the Spark pipeline) and the queue's metadata, on
BullMQ 6's Postgres layout: jobs are read in line order by a keyset cursor and written
idempotently by id, in their states (active ones as waiting), without events."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import asyncpg

from psyq.backends.base import ExportPage, JobRecord, QueueMeta
from psyq.backends.meta import exported_schedulers
from psyq.backends.postgres.connection import BullmqConnection
from psyq.backends.postgres.schedulers import SPEC_COLUMNS, Schedulers
from psyq.errors import PsyqError

__all__ = ["Transfer"]

_START = (-1, 0, 0, "")  # before every job: (rank, key, seq, id)


def _cursor(text: str | None) -> tuple[int, int, int, str]:
    if text is None:
        return _START
    try:
        rank, key, seq, job_id = json.loads(text)
        return int(rank), int(key), int(seq), str(job_id)
    except (ValueError, TypeError) as exc:
        raise PsyqError(f"not an export cursor of this backend: {text!r}") from exc


class Transfer(Schedulers, BullmqConnection):
    """Export / import."""

    async def wait_committed(self) -> None:
        """An import commits without waiting for its WAL to reach the disk (async_commit);
        one synchronous commit after it waits for all of them."""
        await self._rows("transfer.wait_committed")

    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        rows = await self._rows("transfer.page", queue, *_cursor(cursor), limit)
        jobs = self._records(queue, rows)
        for record, row in zip(jobs, rows, strict=True):
            record.state = (
                "waiting" if row["state"] == "waiting" and row["priority"] == 0 else record.state
            )
        ids = [job.id for job in jobs]
        logs: dict[str, list[str]] = {}
        for row in await self._rows("transfer.logs", queue, ids) if ids else []:
            logs.setdefault(row["job_id"], []).append(row["row"])
        # a grouped job waiting in its group's line is a `delayed` row without a due time
        due = {
            row["id"]: row["process_at_ms"]
            for row in rows
            if row["state"] == "delayed" and row["process_at_ms"] is not None
        }
        # every job may be a parent: one whose children all finished keeps their links
        deps = await self._export_deps(queue, ids) if ids else {}
        last = rows[-1] if len(rows) == limit else None
        next_cursor = None
        if last is not None:
            next_cursor = json.dumps([last["line_rank"], last["line_key"], last["seq"], last["id"]])
        return ExportPage(jobs, logs, next_cursor, due, deps, self.key_prefix)

    async def _export_deps(self, queue: str, parents: list[str]) -> dict[str, dict[str, Any]]:
        deps: dict[str, dict[str, Any]] = {}
        for row in await self._rows("transfer.deps", queue, parents):
            entry = deps.setdefault(
                row["parent_id"], {"pending": [], "processed": {}, "failed": {}, "ignored": {}}
            )
            key = row["child_key"]
            if row["status"] == "pending":
                entry["pending"].append(key)
            elif row["status"] == "processed":
                entry["processed"][key] = row["value"] or "null"
            else:
                entry[row["status"]][key] = json.loads(row["value"]) if row["value"] else ""
        return deps

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        if not page.jobs:
            return 0
        page = self.own_keys(page)
        ids = [job.id for job in page.jobs]
        twice = next((job_id for job_id, n in Counter(ids).items() if n > 1), None)
        if twice is not None:
            raise PsyqError(f"job {twice!r} of queue {queue!r} is twice in the page")
        existing = {row["id"]: row for row in await self._rows("transfer.existing", queue, ids)}
        fresh = [job for job in page.jobs if job.id not in existing]
        if not overwrite:
            for job in page.jobs:
                if job.id in existing and not _same(job, existing[job.id]):
                    raise PsyqError(
                        f"job {job.id!r} of queue {queue!r} exists with other contents; "
                        "import with overwrite to replace it"
                    )
        wanted = page.jobs if overwrite else fresh
        if not wanted:
            return 0
        rows = [{"n": n, **self._import_row(queue, job, page)} for n, job in enumerate(wanted)]
        written = await self._import(queue, rows, [job.id for job in wanted], page, overwrite)
        return written

    def _import_row(self, queue: str, job: JobRecord, page: ExportPage) -> dict[str, Any]:
        state = {"active": "waiting", "prioritized": "waiting", "paused": "waiting"}.get(
            job.state or "waiting", job.state or "waiting"
        )
        parent_queue = parent_id = parent_key = None
        if job.parent_key:  # in the layout's form: own_keys converted the page
            parent_queue, parent_id = self.split_job_key(job.parent_key)
            parent_key = job.parent_key
        pending = len((page.deps.get(job.id) or {}).get("pending", ()))
        return {
            "id": job.id,
            "name": job.name,
            "state": state,
            "data": job.data,
            "opts": job.opts,
            "priority": job.priority,
            "delay_ms": job.delay,
            "max_attempts": int(job.opts.get("attempts", 1)),
            "attempts_made": job.attempts_made,
            "attempts_started": job.attempts_started,
            "progress": job.progress,
            "return_value": job.returnvalue,
            "failed_reason": job.failed_reason,
            "stacktrace": list(job.stacktrace),
            "processed_by": job.processed_by,
            "added_at_ms": job.timestamp,
            "process_at_ms": page.due.get(job.id) if state == "delayed" else None,
            "processed_at_ms": job.processed_on,
            "finished_at_ms": job.finished_on,
            "stalled_count": job.stalled_counter,
            "parent_queue": parent_queue,
            "parent_id": parent_id,
            "parent_key": parent_key,
            "pending_deps": pending,
            "scheduler_id": job.opts.get("repeatJobKey"),
            "dedup_id": (job.opts.get("deduplication") or {}).get("id"),
        }

    async def _import(
        self,
        queue: str,
        rows: list[dict[str, Any]],
        ids: list[str],
        page: ExportPage,
        overwrite: bool,
    ) -> int:
        q = self._q
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(q["transfer.async_commit"])
            written = await conn.fetch(q["transfer.write"], queue, json.dumps(rows), overwrite)
            log_ids = [job_id for job_id in ids for _ in page.logs.get(job_id, ())]
            log_rows = [row for job_id in ids for row in page.logs.get(job_id, ())]
            if log_rows:
                await conn.execute(q["transfer.write_logs"], queue, log_ids, log_rows)
            await self._import_deps(conn, queue, ids, page)
            numeric = [int(job_id) for job_id in ids if job_id.isdigit()]
            if numeric:
                await conn.execute(q["transfer.counter_at_least"], queue, max(numeric))
        return len(written)

    async def _import_deps(
        self, conn: asyncpg.Connection, queue: str, ids: list[str], page: ExportPage
    ) -> None:
        links: list[tuple[str, str, str, str | None]] = []  # parent, child key, status, value
        for parent_id in ids:
            entry = page.deps.get(parent_id) or {}
            links += [(parent_id, key, "pending", None) for key in entry.get("pending", ())]
            for key, value in (entry.get("processed") or {}).items():
                links.append((parent_id, key, "processed", value))
            for status in ("failed", "ignored"):
                for key, reason in (entry.get(status) or {}).items():
                    links.append((parent_id, key, status, json.dumps(reason)))
        if links:
            parents, keys, statuses, values = (list(column) for column in zip(*links, strict=True))
            await conn.execute(
                self._q["transfer.write_deps"], queue, parents, keys, statuses, values
            )

    async def get_queue_meta(self, queue: str) -> QueueMeta:
        meta = {row["field"]: row["value"] for row in await self._rows("transfer.meta", queue)}
        ttl = await self.get_rate_limit_ttl(queue, None)
        now = await self.now_ms()
        dedup = {
            row["dedup_id"]: [row["job_id"], row["expire_at_ms"]]
            for row in await self._rows("transfer.dedup", queue)
        }
        max_jobs, duration = meta.get("max"), meta.get("duration")
        return {
            "paused": meta.get("paused") == "1",
            "last_id": int(await self._value("transfer.last_id", queue)),
            "limited_until": now + ttl if ttl > 0 and not max_jobs else 0,
            "global_limiter": [int(max_jobs), int(duration)] if max_jobs and duration else None,
            "global_concurrency": int(meta["concurrency"]) if meta.get("concurrency") else None,
            "dedup": dedup,
            "schedulers": await exported_schedulers(self, queue),
            "max_len_events": int(meta.get("opts.maxLenEvents") or 10_000),
        }

    async def set_queue_meta(self, queue: str, meta: QueueMeta) -> None:
        if int(meta.get("last_id") or 0) > 0:
            await self._rows("transfer.counter_at_least", queue, int(meta["last_id"]))
        limiter = meta.get("global_limiter")
        if limiter:
            await self.set_global_rate_limit(queue, None)
            await self._rows(
                "admin.set_meta", queue, ["max", "duration"], [str(v) for v in limiter]
            )
        if meta.get("global_concurrency"):
            await self._rows(
                "admin.set_meta", queue, ["concurrency"], [str(meta["global_concurrency"])]
            )
        await self._rows("events.max_len", queue, str(int(meta.get("max_len_events") or 10_000)))
        now = await self.now_ms()
        if int(meta.get("limited_until") or 0) > now:
            await self._rows("admin.rate_limit", queue, int(meta["limited_until"]) - now)
        dedup = meta.get("dedup") or {}
        if dedup:
            await self._rows(
                "transfer.write_dedup",
                queue,
                list(dedup),
                [v[0] for v in dedup.values()],
                [v[1] for v in dedup.values()],
            )
        for scheduler_id, spec in (meta.get("schedulers") or {}).items():
            await self._rows(
                "transfer.write_scheduler", queue, json.dumps(_scheduler_row(scheduler_id, spec))
            )
        if meta.get("paused"):
            await self._rows("admin.pause", queue, True)


def _scheduler_row(scheduler_id: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    name, data, opts, _timestamp = spec["template"]
    row: dict[str, Any] = {column: spec.get(key) for key, column in SPEC_COLUMNS.items()}
    row.update(
        scheduler_id=scheduler_id,
        name=name,
        next_run_ms=spec.get("next"),
        iteration_count=int(spec.get("iterationCount") or 0),
        template_data=json.loads(data) if isinstance(data, str) else data,
        template_opts=opts,
    )
    return row


def _same(job: JobRecord, row: asyncpg.Record) -> bool:
    """The stored job is the exported one: same name, data and timestamp."""
    return bool(
        row["name"] == job.name
        and json.loads(row["data"]) == json.loads(job.data)
        and row["added_at_ms"] == job.timestamp
    )
