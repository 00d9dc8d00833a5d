"""`Store`: what the dashboard reads and does, as plain JSON-able values.

One open backend for the URL, one `Queue` per queue name (opened on first use, closed with
the store). Queue names are listed at most once every `NAMES_MAX_AGE` seconds: on Redis the
listing scans the keyspace.
"""

from __future__ import annotations

import time
from typing import Any

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import JOB_STATES, STATE_ORDER, BackendAdapter
from psyq.core.queue import CLEANABLE_STATES, FINISHED_STATES, qualify_connection
from psyq.errors import InvalidOptionsError, JobNotFoundError, PsyqError

__all__ = ["NotFound", "Store"]

NAMES_MAX_AGE = 2.0
MAX_PAGE = 500


class NotFound(PsyqError):
    """A queue or job the store does not hold."""


class Store:
    def __init__(self, connection: str | None, prefix: str = "bull") -> None:
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
    async def queue_names(self, fresh: bool = False) -> list[str]:
        if fresh or time.monotonic() - self._names_read > NAMES_MAX_AGE:
            if self._backend is None:
                raise PsyqError("the dashboard's store is not open")
            self._names = sorted(await self._backend.list_queues())
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
        return [await self.summary(name) for name in await self.queue_names()]

    async def details(self, name: str) -> dict[str, Any]:
        queue = await self.queue(name)
        view = await self.summary(name)
        view["workers"] = await queue.get_workers()
        view["schedulers"] = await queue.get_job_schedulers()
        return view

    async def jobs(self, name: str, state: str, start: int, end: int) -> dict[str, Any]:
        """A page of a state's jobs, newest first ([start, end], end inclusive)."""
        if state not in JOB_STATES:
            raise InvalidOptionsError(f"unknown state {state!r}; known: {', '.join(JOB_STATES)}")
        if start < 0 or end < start or end - start >= MAX_PAGE:
            raise InvalidOptionsError(
                f"a page is 0 <= start <= end with at most {MAX_PAGE} jobs, got {start}..{end}"
            )
        queue = await self.queue(name)
        jobs = await queue.get_jobs([state], start, end)
        total = (await queue.get_job_counts(state))[state]
        return {
            "state": state,
            "start": start,
            "end": end,
            "total": total,
            "jobs": [_job_line(job) for job in jobs],
        }

    async def job(self, name: str, job_id: str) -> dict[str, Any]:
        queue = await self.queue(name)
        job = await queue.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r} in queue {name!r}")
        view = {"state": await job.get_state(), **job.to_dict()}
        view["logs"] = (await queue.get_job_logs(job.id))["logs"]
        return view

    # ------------------------------------------------------------------ acting
    async def pause(self, name: str) -> dict[str, Any]:
        await (await self.queue(name)).pause()
        return {"paused": True}

    async def resume(self, name: str) -> dict[str, Any]:
        await (await self.queue(name)).resume()
        return {"paused": False}

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

    async def retry_job(self, name: str, job_id: str) -> dict[str, Any]:
        job = await self._job(name, job_id)
        await job.retry(await job.get_state())
        return {"retried": job_id}

    async def promote_job(self, name: str, job_id: str) -> dict[str, Any]:
        await (await self._job(name, job_id)).promote()
        return {"promoted": job_id}

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
    }
