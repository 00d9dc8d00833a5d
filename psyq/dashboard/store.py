"""`Store`: what the dashboard reads and does, as plain JSON-able values.

One open backend for the URL, one `Queue` per queue name (opened on first use, closed with
the store). Queue names are listed at most once every `NAMES_MAX_AGE` seconds: on Redis the
listing scans the keyspace.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import JOB_STATES, STATE_ORDER, BackendAdapter, FlowTree
from psyq.core.queue import CLEANABLE_STATES, FINISHED_STATES, qualify_connection
from psyq.errors import InvalidOptionsError, JobNotFoundError, JobStateError, PsyqError
from psyq.rules.prefix import DEFAULT_PREFIX
from psyq.rules.slices import inclusive_slice

__all__ = ["NotFound", "Store"]

NAMES_MAX_AGE = 2.0
MAX_PAGE = 500
# A search by name reads a state's jobs, newest first, this many at most (it has no index).
SEARCH_SCAN = 5_000
SEARCH_CHUNK = 500
METRICS_MINUTES = 24 * 60
FLOW_MAX_CHILDREN = 100
FLOW_MAX_UP = 32
MAX_LOGS = 1_000  # a job's page shows its newest log lines, this many at most


class NotFound(PsyqError):
    """A queue or job the store does not hold."""


class Store:
    def __init__(self, connection: str | None, prefix: str = DEFAULT_PREFIX) -> None:
        self.connection = connection
        self.prefix = prefix
        self._backend: BackendAdapter | None = None
        self._queues: dict[str, psyq.Queue] = {}
        self._names: list[str] = []
        self._names_read = 0.0

    async def open(self) -> None:
        self._backend = await open_backend(qualify_connection(self.connection, self.prefix))

    async def close(self) -> None:
        for queue in self._queues.values():
            await queue.close()
        self._queues.clear()
        if self._backend is not None:
            await release_backend(self._backend)
            self._backend = None

    # ------------------------------------------------------------------ reading
    async def now_ms(self) -> int:
        """The store's clock (job times are the store's, and so are "3 min ago"s)."""
        return await self._open_backend().now_ms()

    async def queue_names(self, fresh: bool = False) -> list[str]:
        if fresh or time.monotonic() - self._names_read > NAMES_MAX_AGE:
            self._names = sorted(await self._open_backend().list_queues())
            self._names_read = time.monotonic()
        return self._names

    async def queue(self, name: str) -> psyq.Queue:
        """The Queue of a queue the store holds; NotFound names it otherwise."""
        if name not in await self.queue_names() and name not in await self.queue_names(True):
            raise NotFound(f"no queue {name!r} in this store")
        if name not in self._queues:
            self._queues[name] = psyq.Queue(name, connection=self.connection, prefix=self.prefix)
        return self._queues[name]

    async def summary(self, name: str) -> dict[str, Any]:
        queue = await self.queue(name)
        return {
            "name": name,
            "paused": await queue.is_paused(),
            "counts": await queue.get_job_counts(*STATE_ORDER),
            "workers": len(await queue.get_workers()),
        }

    async def summaries(self) -> list[dict[str, Any]]:
        names = await self.queue_names()
        return list(await asyncio.gather(*(self.summary(name) for name in names)))

    async def details(self, name: str) -> dict[str, Any]:
        queue = await self.queue(name)
        view = await self.summary(name)
        view["workers"] = await queue.get_workers()
        view["schedulers"] = await queue.get_job_schedulers()
        return view

    async def jobs(
        self, name: str, state: str, start: int, end: int, search: str = ""
    ) -> dict[str, Any]:
        """A page of a state's jobs, newest first ([start, end], end inclusive). With
        `search`, the page is of the jobs whose name contains it (case-insensitive), among
        the state's newest SEARCH_SCAN; `scanned` says how many were read."""
        if state not in JOB_STATES:
            raise InvalidOptionsError(f"unknown state {state!r}; known: {', '.join(JOB_STATES)}")
        if start < 0 or end < start or end - start >= MAX_PAGE:
            raise InvalidOptionsError(
                f"a page is 0 <= start <= end with at most {MAX_PAGE} jobs, got {start}..{end}"
            )
        queue = await self.queue(name)
        total = (await queue.get_job_counts(state))[state]
        page: dict[str, Any] = {"state": state, "start": start, "end": end, "total": total}
        if not search:
            jobs = await queue.get_jobs([state], start, end)
            return {**page, "jobs": [_job_line(job) for job in jobs]}
        found, scanned = await _search(queue, state, search.casefold())
        page.update(total=len(found), search=search, scanned=scanned, all_scanned=scanned >= total)
        return {**page, "jobs": [_job_line(job) for job in inclusive_slice(found, start, end)]}

    async def job(self, name: str, job_id: str) -> dict[str, Any]:
        queue = await self.queue(name)
        job = await queue.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r} in queue {name!r}")
        view = {"state": await job.get_state(), **job.to_dict()}
        newest = await queue.get_job_logs(job.id, 0, MAX_LOGS - 1, asc=False)
        view["logs"] = newest["logs"][::-1]  # the newest MAX_LOGS, oldest first
        view["logs_total"] = newest["count"]
        view["parent"] = _split_key(job.parent_key, self._open_backend())
        return view

    async def metrics(self, name: str, minutes: int) -> dict[str, Any]:
        """Jobs completed and failed per minute over the last `minutes`, oldest first."""
        if not 1 <= minutes <= METRICS_MINUTES:
            raise InvalidOptionsError(f"minutes must be 1..{METRICS_MINUTES}, got {minutes}")
        queue = await self.queue(name)
        counts = await queue.get_job_counts(*FINISHED_STATES)
        view: dict[str, Any] = {"minutes": minutes, "source": "metrics"}
        for kind in FINISHED_STATES:
            found = await queue.get_metrics(kind, 0, minutes - 1)
            if found["meta"]["count"] == 0 and counts[kind]:
                # The store kept no per-minute metrics for the jobs it holds (SQLite keeps
                # them in memory: none after a restart): count the kept jobs by the minute
                # they finished.
                now = await self._open_backend().now_ms()
                view[kind] = await _per_minute(queue, kind, minutes, now)
                view["source"] = "jobs"
                view[f"{kind}_total"] = counts[kind]
                continue
            points = list(reversed(found["data"]))
            view[kind] = [0] * (minutes - len(points)) + points
            view[f"{kind}_total"] = found["meta"]["count"]
        return view

    async def flow(self, name: str, job_id: str) -> dict[str, Any]:
        """The whole flow the job belongs to: its root, then every child down, each node
        {queue, id, name, state, children} (at most FLOW_MAX_CHILDREN children a node)."""
        await self.queue(name)
        backend = self._open_backend()
        root = (name, job_id)
        for _ in range(FLOW_MAX_UP):
            record = await backend.get_job(*root)
            if record is None:
                raise NotFound(f"no job {root[1]!r} in queue {root[0]!r}")
            parent = _split_key(record.parent_key, backend)
            if parent is None:
                break
            root = (parent["queue"], parent["id"])
        tree = await backend.get_flow(root[0], root[1], 0, FLOW_MAX_CHILDREN)
        if tree is None:
            raise NotFound(f"no job {root[1]!r} in queue {root[0]!r}")
        return await _flow_node(backend, tree)

    def _open_backend(self) -> BackendAdapter:
        if self._backend is None:
            raise PsyqError("the dashboard's store is not open")
        return self._backend

    # ------------------------------------------------------------------ acting
    async def pause(self, name: str) -> dict[str, Any]:
        await (await self.queue(name)).pause()
        return {"paused": True}

    async def resume(self, name: str) -> dict[str, Any]:
        await (await self.queue(name)).resume()
        return {"paused": False}

    async def groups(self, name: str, start: int, end: int) -> dict[str, Any]:
        """A page of the queue's groups (by id), how many there are and their jobs."""
        queue = await self.queue(name)
        return {
            "count": await queue.get_groups_count(),
            "waiting": await queue.get_groups_job_count(),
            "groups": await queue.get_groups(start, end),
        }

    async def group_action(self, name: str, group: str, action: str) -> dict[str, Any]:
        """Pause or resume one group: {"paused": now, "changed": whether it was not}."""
        queue = await self.queue(name)
        pause = action == "pause"
        changed = await (queue.pause_group(group) if pause else queue.resume_group(group))
        return {"group": group, "paused": pause, "changed": changed}

    async def retry_all(self, name: str, state: str) -> dict[str, Any]:
        if state not in FINISHED_STATES:
            raise InvalidOptionsError(f"retry state must be failed or completed, got {state!r}")
        return {"retried": await (await self.queue(name)).retry_jobs(state)}

    async def clean(self, name: str, state: str, grace: int, limit: int) -> dict[str, Any]:
        if state not in CLEANABLE_STATES:
            raise InvalidOptionsError(
                f"cannot clean state {state!r}; choose from {', '.join(CLEANABLE_STATES)}"
            )
        removed = await (await self.queue(name)).clean(grace, limit, state)
        return {"removed": len(removed)}

    async def promote_all(self, name: str) -> dict[str, Any]:
        return {"promoted": await (await self.queue(name)).promote_jobs()}

    async def retry_job(self, name: str, job_id: str) -> dict[str, Any]:
        job = await self._job(name, job_id)
        await job.retry(await job.get_state())
        return {"retried": job_id}

    async def promote_job(self, name: str, job_id: str) -> dict[str, Any]:
        await (await self._job(name, job_id)).promote()
        return {"promoted": job_id}

    async def cancel_job(self, name: str, job_id: str) -> dict[str, Any]:
        """Ask the worker running the job to stop it (cooperative; see Queue.cancel_job)."""
        queue = await self.queue(name)
        if not await queue.cancel_job(job_id, "cancelled from the dashboard"):
            state = await queue.get_job_state(job_id)
            if state == "unknown":
                raise NotFound(f"no job {job_id!r} in queue {name!r}")
            raise JobStateError(job_id, state, "cancel")
        return {"cancelled": job_id}

    async def remove_job(self, name: str, job_id: str) -> dict[str, Any]:
        if not await (await self.queue(name)).remove(job_id):
            raise NotFound(f"no job {job_id!r} in queue {name!r} (or it is locked)")
        return {"removed": job_id}

    async def _job(self, name: str, job_id: str) -> psyq.Job:
        job = await (await self.queue(name)).get_job(job_id)
        if job is None:
            raise JobNotFoundError(name, job_id)
        return job


def _job_line(job: psyq.Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "attempts": job.attempts_made,
        "timestamp": job.timestamp,
        "processed_on": job.processed_on,
        "finished_on": job.finished_on,
        "failed_reason": job.failed_reason,
        "progress": job.progress,
        "delay": job.delay,
        "priority": job.priority,
        "parent_key": job.parent_key,
        "data_preview": _preview(job.data),
    }


PREVIEW_CHARS = 160


def _preview(value: Any) -> str:
    """The start of a job's data as compact JSON, for a list (the job page shows it all)."""
    if value is None:
        return ""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


async def _search(queue: psyq.Queue, state: str, text: str) -> tuple[list[psyq.Job], int]:
    """The jobs of `state` whose name contains `text`, among its newest SEARCH_SCAN."""
    found: list[psyq.Job] = []
    scanned = 0
    while scanned < SEARCH_SCAN:
        chunk = await queue.get_jobs([state], scanned, scanned + SEARCH_CHUNK - 1)
        scanned += len(chunk)
        found += [job for job in chunk if text in job.name.casefold()]
        if len(chunk) < SEARCH_CHUNK:
            break
    return found, scanned


async def _per_minute(queue: psyq.Queue, kind: str, minutes: int, now_ms: int) -> list[int]:
    """Jobs of `kind` (newest finished first) per minute they finished, oldest minute first,
    among the newest SEARCH_SCAN."""
    first_minute = now_ms // 60_000 - minutes + 1
    points = [0] * minutes
    for start in range(0, SEARCH_SCAN, SEARCH_CHUNK):
        chunk = await queue.get_jobs([kind], start, start + SEARCH_CHUNK - 1)
        for job in chunk:
            minute = (job.finished_on or 0) // 60_000 - first_minute
            if minute < 0:
                return points
            points[min(minute, minutes - 1)] += 1
        if len(chunk) < SEARCH_CHUNK:
            break
    return points


def _split_key(key: str | None, backend: BackendAdapter) -> dict[str, str] | None:
    """{"queue", "id"} of a parent key, in the store's form (`<prefix>:<queue>:<id>`, or
    `<queue>:<id>` on Postgres)."""
    if not key:
        return None
    queue, job_id = backend.split_job_key(key)
    return {"queue": queue, "id": job_id} if job_id else None


async def _flow_node(backend: BackendAdapter, tree: FlowTree) -> dict[str, Any]:
    record = tree["job"]
    state = record.state or await backend.get_state(record.queue, record.id)
    return {
        "queue": record.queue,
        "id": record.id,
        "name": record.name,
        "state": state,
        "failed_reason": record.failed_reason,
        "children": [await _flow_node(backend, child) for child in tree["children"]],
    }
