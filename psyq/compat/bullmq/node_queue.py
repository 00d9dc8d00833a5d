"""Node BullMQ 6's Queue calls that the `bullmq` package for Python lacks (the table of
them all: psyq.compat.bullmq.node_surface)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from psyq.backends.base import QueueMeta
from psyq.compat.bullmq.backend import Backend
from psyq.compat.bullmq.job import Job
from psyq.core.events import EventEmitter
from psyq.core.job import Job as CoreJob
from psyq.core.job import QueueRef
from psyq.errors import JobNotFoundError

__all__ = ["NodeQueueCalls"]


class NodeQueueCalls(EventEmitter):
    """Calls of Node BullMQ 6's Queue that the Python package lacks, mixed into the
    layer's Queue (which gives `name`, `jobsOpts`, `backend` and the calls below that
    raise NotImplementedError here)."""

    name: str
    jobsOpts: dict[str, Any]
    backend: Backend

    @property
    def _core(self) -> Any:
        raise NotImplementedError  # the Queue's

    async def close(self) -> None:
        raise NotImplementedError  # the Queue's

    async def getJob(self, job_id: str) -> Job | None:
        raise NotImplementedError  # the Queue's

    async def getJobs(
        self,
        types: Iterable[str] | str | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        raise NotImplementedError  # the Queue's

    async def getJobCounts(self, *types: str) -> dict[str, int]:
        raise NotImplementedError  # the Queue's

    async def getActiveCount(self) -> int:
        raise NotImplementedError  # the Queue's

    async def getMetrics(self, type: str, start: int = 0, end: int = -1) -> dict[str, Any]:
        raise NotImplementedError  # the Queue's

    async def getGlobalConcurrency(self) -> int | None:
        raise NotImplementedError  # the Queue's

    async def _meta(self) -> QueueMeta:
        raise NotImplementedError  # the Queue's

    async def removeDeduplicationKey(self, id: str) -> int:
        raise NotImplementedError  # the Queue's

    @property
    def token(self) -> str:
        """A random id of this Queue object (Node's `queue.token`)."""
        if "_token" not in self.__dict__:
            self.__dict__["_token"] = str(uuid.uuid4())
        return str(self.__dict__["_token"])

    @property
    def defaultJobOptions(self) -> dict[str, Any]:
        return dict(self.jobsOpts)

    @property
    def closing(self) -> bool:
        """True once close() began (Node: the closing promise)."""
        return bool(getattr(self, "_closing", False))

    async def disconnect(self) -> None:
        await self.close()

    def getBackend(self) -> Any:
        return self.backend

    async def addJobLog(self, jobId: str, logRow: str, keepLogs: int = 0) -> int:
        return await Job.addJobLog(self, jobId, logRow, keepLogs)

    async def updateJobProgress(self, jobId: str, progress: Any) -> None:
        """Set job `jobId`'s progress; emits `progress(jobId, progress)`, as Node's Queue
        (a job's own updateProgress emits `progress(job, progress)`)."""
        job = await self._core.get_job(str(jobId))
        if job is None:
            raise JobNotFoundError(self.name, str(jobId))
        await job.update_progress(progress)
        self.emit("progress", jobId, progress)

    def _job_event(self, event: str, job: Job, *args: Any) -> None:
        """What Node's Job emits on its queue (`progress(job, progress)`, `removed(job)`)."""
        self.emit(event, job, *args)

    async def removeDebounceKey(self, id: str) -> int:
        return await self.removeDeduplicationKey(id)

    async def getRanges(
        self, types: Iterable[str] | str, start: int = 0, end: int = 1, asc: bool = False
    ) -> list[str]:
        """The ids of the jobs `getJobs` would return (`end` 1 by default, as Node)."""
        return [str(job.id) for job in await self.getJobs(types, start, end, asc)]

    async def isMaxed(self) -> bool:
        """True when the queue's global concurrency is reached by its active jobs."""
        concurrency = await self.getGlobalConcurrency()
        return concurrency is not None and await self.getActiveCount() >= concurrency

    async def getMeta(self) -> dict[str, Any]:
        """The queue's settings: `paused`, and when set `concurrency`, `max` and
        `duration` (the global limits) and `maxLenEvents`."""
        meta: Mapping[str, Any] = await self._meta()
        result: dict[str, Any] = {"paused": bool(meta.get("paused"))}
        if meta.get("global_concurrency") is not None:
            result["concurrency"] = int(meta["global_concurrency"])
        if meta.get("global_limiter"):
            result["max"], result["duration"] = (int(n) for n in meta["global_limiter"])
        if meta.get("max_len_events") is not None:
            result["maxLenEvents"] = int(meta["max_len_events"])
        return result

    async def getDependencies(
        self, parentId: str, type: str, start: int = 0, end: int = -1
    ) -> dict[str, Any]:
        """A page of parent `parentId`'s children: `type` 'processed' (items `{id, v}`: the
        child's job key and its decoded return value) or 'pending' (items `{id}`), `jobs`
        the children themselves, `total` of that type."""
        if type not in ("processed", "pending"):
            raise ValueError(f"type must be 'processed' or 'pending', got {type!r}")
        parent = await self.getJob(parentId)
        if parent is None:
            return {"items": [], "jobs": [], "total": 0}
        dependencies: Mapping[str, Any] = await parent.core.get_dependencies()
        keys = sorted(dependencies.get("processed" if type == "processed" else "unprocessed") or ())
        page = keys[start : None if end < 0 else end + 1]
        values = dependencies.get("processed") or {}
        items = [_item(key, values[key]) if type == "processed" else {"id": key} for key in page]
        jobs = [await _job_of(parent, key) for key in page]
        return {
            "items": items,
            "jobs": [job for job in jobs if job is not None],
            "total": len(keys),
        }

    async def recordJobCountsMetric(self, *types: str) -> dict[str, int]:
        """The job counts (Node also records them on its telemetry meter; psyq exports
        them through psyq.plugins.prometheus)."""
        return await self.getJobCounts(*types)

    async def exportPrometheusMetrics(
        self, globalVariables: Mapping[str, str] | None = None
    ) -> str:
        """The queue's job counts by state and its completed / failed totals in
        Prometheus's text format, as Node writes them (`globalVariables`: labels added to
        every line)."""
        labels = "".join(
            f', {name}="{_label(value)}"' for name, value in (globalVariables or {}).items()
        )
        queue = f'queue="{_label(self.name)}"'
        lines = [
            "# HELP bullmq_job_count Number of jobs in the queue by state",
            "# TYPE bullmq_job_count gauge",
        ]
        for state, count in (await self.getJobCounts()).items():
            lines.append(f'bullmq_job_count{{{queue}, state="{state}"{labels}}} {count}')
        for kind in ("completed", "failed"):
            total = ((await self.getMetrics(kind)).get("meta") or {}).get("count", 0)
            lines.append(f"# HELP bullmq_job_{kind}_total Total number of {kind} jobs")
            lines.append(f"# TYPE bullmq_job_{kind}_total counter")
            lines.append(f"bullmq_job_{kind}_total{{{queue}{labels}}} {int(total)}")
        return "\n".join(lines)


def _label(value: Any) -> str:
    """A Prometheus label value, escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _item(key: str, value: Any) -> dict[str, Any]:
    """A processed child as Node pages it: its value decoded, or `err` saying why not."""
    try:
        return {"id": key, "v": json.loads(value) if isinstance(value, str) else value}
    except ValueError as exc:
        return {"id": key, "err": str(exc)}


async def _job_of(parent: Job, key: str) -> Job | None:
    """The child job named by job key `key` (of any queue of the parent's store)."""
    queue, job_id = parent._child_of(key)
    record = await parent.core._backend.get_job(queue, job_id)
    if record is None:
        return None
    return Job.wrap(parent.queue, CoreJob(QueueRef(queue, parent.core._backend), record))
