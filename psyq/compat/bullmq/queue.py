"""`Queue(name, opts)`: the `bullmq` package's Queue, each method mapped onto psyq's core
Queue (`opts`: `connection`, `prefix`, `defaultJobOptions`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from psyq.backends.base import QueueMeta
from psyq.compat.bullmq.backend import Backend, create_backend
from psyq.compat.bullmq.job import Job
from psyq.compat.bullmq.node_queue import NodeQueueCalls
from psyq.errors import JobNotFoundError, PsyqError
from psyq.rules.prefix import DEFAULT_PREFIX

if TYPE_CHECKING:
    from psyq.compat.bullmq.job_scheduler import JobScheduler

__all__ = ["Queue", "add_error", "create_backend", "sanitize_job_types"]

ALL_TYPES = (
    "active",
    "completed",
    "delayed",
    "failed",
    "prioritized",
    "waiting",
    "waiting-children",
)
_ALIASES = {"wait": "waiting"}
MAX_SAFE_INTEGER = 2**53 - 1
NO_RATE_LIMIT = -2  # Node's getRateLimitTtl() with no limit: Redis PTTL of a missing key


def sanitize_job_types(types: Iterable[str] | None) -> list[str]:
    """The job states asked for (deduplicated; `wait` means `waiting`), else all."""
    asked = list(types or ())
    if not asked:
        return list(ALL_TYPES)
    return list(dict.fromkeys(_ALIASES.get(t, t) for t in asked))


def core_states(states: list[str]) -> list[str]:
    """The core states behind `bullmq` states: a paused queue's jobs are `waiting` in
    `bullmq` 3.x (BullMQ 6's layout has no paused list), `paused` in psyq."""
    if "waiting" in states and "paused" not in states:
        return [*states, "paused"]
    return states


def node_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Core counts as BullMQ 6 counts them: a paused queue's jobs are waiting (BullMQ 6
    keeps them in `wait`; psyq's stores keep them apart, Redis in BullMQ's older `paused`
    list), and `paused` counts none."""
    result = dict(counts)
    result["waiting"] = result.get("waiting", 0) + result.pop("paused", 0)
    result["paused"] = 0
    return result


def public_state(state: str) -> str:
    return "waiting" if state == "paused" else state


def add_error(exc: PsyqError, opts: Mapping[str, Any] | None) -> Exception:
    """The error `bullmq` raises for a job whose parent does not exist."""
    parent = (opts or {}).get("parent")
    if isinstance(exc, JobNotFoundError) and parent:
        return TypeError(f"Missing key for parent job {parent['queue']}:{parent['id']}. addJob")
    return exc


class Queue(NodeQueueCalls):
    """A queue, with the `bullmq` package's constructor and camelCase methods (and Node
    BullMQ 6's own calls: node_queue.py)."""

    def __init__(self, name: str, opts: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.name = name
        self.opts = dict(opts or {})
        self.jobsOpts = self.opts.get("defaultJobOptions", {})
        self.prefix = self.opts.get("prefix", DEFAULT_PREFIX)
        self.backend = create_backend(name, self.opts)
        self.keys = self.backend.keys
        self.scripts = None  # bullmq's Lua script objects: psyq's stores keep their own
        self._job_scheduler: JobScheduler | None = None

    @property
    def qualifiedName(self) -> str:
        return str(self.backend.qualifiedName)

    @property
    def redisConnection(self) -> Any:
        return self.backend.conn if isinstance(self.backend, Backend) else None

    @property
    def client(self) -> Any:
        """The redis-py client once the queue is open on Redis, else None."""
        return getattr(self.backend, "conn", None)

    @property
    def _core(self) -> Any:
        return self.backend.core

    def toKey(self, type: str) -> str:
        return f"{self.qualifiedName}:{type}"

    async def waitUntilReady(self) -> Any:
        return await self.backend.open()

    async def close(self) -> None:
        self._closing = True
        await self.backend.close()

    # ------------------------------------------------------------------ adding
    async def add(self, name: str, data: Any = None, opts: Mapping[str, Any] | None = None) -> Job:
        """Add a job; emits `waiting` with it (as Node BullMQ's `add`, not its `addBulk`)."""
        try:
            core = await self._core.add(name, data, dict(opts or {}))
        except PsyqError as exc:
            raise add_error(exc, opts) from None
        job = Job.wrap(self, core)
        self.emit("waiting", job)
        return job

    async def addBulk(self, jobs: Sequence[Mapping[str, Any]]) -> list[Job]:
        entries = [
            {"name": job.get("name"), "data": job.get("data"), "opts": dict(job.get("opts") or {})}
            for job in jobs
        ]
        return [Job.wrap(self, core) for core in await self._core.add_bulk(entries)]

    # ------------------------------------------------------------------ reading
    async def getJob(self, job_id: str) -> Job | None:
        core = await self._core.get_job(str(job_id))
        return None if core is None else Job.wrap(self, core)

    async def getJobs(
        self,
        types: Iterable[str] | str | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        states = core_states(sanitize_job_types([types] if isinstance(types, str) else types))
        cores = await self._core.get_jobs(states, start, end, asc)
        wanted = end - start + 1 if end >= 0 else 0
        extra = 0
        while len(cores) < wanted:  # some ids in the range had no job any more: read on
            extra += wanted - len(cores)
            more = await self._core.get_jobs(states, start, end + extra, asc)
            if len(more) <= len(cores):
                break
            cores = more[:wanted]
        return [Job.wrap(self, core) for core in cores]

    def sanitizeJobTypes(self, types: Iterable[str] | None) -> list[str]:
        return sanitize_job_types(types)

    async def getJobState(self, job_id: str) -> str:
        return public_state(str(await self._core.get_job_state(str(job_id))))

    async def getJobCounts(self, *types: str) -> dict[str, int]:
        """{type: count}, under the names asked (as BullMQ): `wait` and `waiting` both
        count the waiting jobs, a paused queue's included, and `paused` none, as BullMQ 6
        counts (it keeps a paused queue's jobs in `wait`); `repeat` counts the job
        schedulers."""
        asked = list(dict.fromkeys(types)) or list(ALL_TYPES)
        states = [s for s in sanitize_job_types(asked) if s != "repeat"]
        counts: dict[str, int] = {}
        if states:
            stored = await self._core.get_job_counts(*dict.fromkeys([*states, "paused"]))
            counts = node_counts(stored)
        if "repeat" in asked:
            counts["repeat"] = await self.getJobSchedulersCount()
        return {kind: counts.get(_ALIASES.get(kind, kind), 0) for kind in asked}

    async def getJobCountByTypes(self, *types: str) -> int:
        return sum((await self.getJobCounts(*types)).values())

    async def count(self) -> int:
        return int(await self._core.count())

    async def getCompletedCount(self) -> int:
        return await self.getJobCountByTypes("completed")

    async def getFailedCount(self) -> int:
        return await self.getJobCountByTypes("failed")

    async def getDelayedCount(self, timestamp: int | None = None) -> int:
        """Delayed jobs; with Node's `timestamp` (ms), those due strictly before it."""
        if timestamp is None:
            return await self.getJobCountByTypes("delayed")
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise ValueError(f"timestamp must be a whole number of ms, got {timestamp!r}")
        due = [job.timestamp + job.delay for job in await self.getDelayed()]
        return sum(when < timestamp for when in due)

    async def getActiveCount(self) -> int:
        return await self.getJobCountByTypes("active")

    async def getWaitingCount(self) -> int:
        return await self.getJobCountByTypes("waiting")

    async def getPrioritizedCount(self) -> int:
        return await self.getJobCountByTypes("prioritized")

    async def getWaitingChildrenCount(self) -> int:
        return await self.getJobCountByTypes("waiting-children")

    async def getCountsPerPriority(self, priorities: Iterable[int]) -> dict[str, int]:
        unique = list(dict.fromkeys(priorities))
        counts = await self._core.get_counts_per_priority(unique)
        return {str(p): int(counts.get(str(p), 0)) for p in unique}

    async def getActive(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.getJobs(["active"], start, end, True)

    async def getCompleted(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.getJobs(["completed"], start, end, False)

    async def getDelayed(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.getJobs(["delayed"], start, end, True)

    async def getFailed(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.getJobs(["failed"], start, end, False)

    async def getPrioritized(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.getJobs(["prioritized"], start, end, True)

    async def getWaiting(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.getJobs(["waiting"], start, end, True)

    async def getWaitingChildren(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.getJobs(["waiting-children"], start, end, True)

    async def getJobLogs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> dict[str, Any]:
        logs: dict[str, Any] = await self._core.get_job_logs(str(job_id), start, end, asc)
        return logs

    async def getMetrics(self, type: str, start: int = 0, end: int = -1) -> dict[str, Any]:
        metrics: dict[str, Any] = await self._core.get_metrics(type, start, end)
        return metrics

    async def get_workers(self) -> list[dict[str, Any]]:
        workers: list[dict[str, Any]] = await self._core.get_workers()
        return workers

    getWorkers = get_workers

    async def get_workers_count(self) -> int:
        return len(await self.get_workers())

    getWorkersCount = get_workers_count

    # ------------------------------------------------------------------ admin
    async def pause(self) -> None:
        """Pause the queue for every worker; emits `paused` (as Node's Queue)."""
        await self._core.pause()
        self.emit("paused")

    async def resume(self) -> None:
        """Resume the queue; emits `resumed` (as Node's Queue)."""
        await self._core.resume()
        self.emit("resumed")

    async def isPaused(self) -> bool:
        return bool(await self._core.is_paused())

    async def drain(self, delayed: bool = False) -> None:
        await self._core.drain(delayed)

    async def clean(self, grace: int, limit: int = 0, type: str = "completed") -> list[str]:
        """Remove the jobs of `type` older than `grace` ms; emits `cleaned(ids, type)` with
        Node's state name (`waiting` is `wait`), even when none was removed, as Node."""
        cleaned: list[str] = await self._core.clean(grace, limit, _ALIASES.get(type, type))
        self.emit("cleaned", cleaned, "wait" if type == "waiting" else type)
        return cleaned

    async def obliterate(self, force: bool | Mapping[str, Any] = False) -> None:
        """Remove the queue and all its jobs; with force even while jobs are active.
        `force` may be Node's `{"force": ..., "count": ...}` (`count`, Node's batch size,
        changes nothing: psyq obliterates in one call)."""
        if isinstance(force, Mapping):
            force = bool(force.get("force", False))
        try:
            await self._core.obliterate(force)
        except PsyqError as exc:
            if "active" in str(exc):
                raise Exception(f"Cannot obliterate queue with active jobs: {exc}") from None
            raise

    async def remove(self, job_id: str, opts: Mapping[str, Any] | None = None) -> int:
        """1 when the job was removed (emitting `removed(jobId)`, as Node), 0 when it does
        not exist or is being processed."""
        remove_children = bool((opts or {}).get("removeChildren", True))
        removed = int(await self._core.remove(str(job_id), remove_children))
        if removed == 1:
            self.emit("removed", job_id)
        return removed

    async def retryJobs(self, opts: Mapping[str, Any] | None = None) -> None:
        """Move failed (or, with `state`, completed) jobs back to waiting; `timestamp`: only
        those that finished before it. `count` is `bullmq`'s batch size: all are retried."""
        opts = opts or {}
        await self._core.retry_jobs(opts.get("state") or "failed", 0, opts.get("timestamp"))

    async def promoteJobs(self, opts: Mapping[str, Any] | None = None) -> None:
        await self._core.promote_jobs(0)

    async def trimEvents(self, maxLength: int) -> int:
        """Keep about `maxLength` events; on Redis the stream is trimmed now."""
        client = self.client
        if client is not None:
            return int(await client.xtrim(self.keys["events"], maxlen=maxLength))
        await self._core.set_max_len_events(max(1, maxLength))
        return 0

    async def removeDeprecatedPriorityKey(self) -> int:
        client = self.client
        return 0 if client is None else int(await client.delete(self.toKey("priority")))

    # ------------------------------------------------------------------ limits
    async def rateLimit(self, expire_time_ms: int) -> None:
        """Hold the whole queue for `expire_time_ms` (as a worker's rate limit does)."""
        adapter = await self.backend.adapter()
        await adapter.rate_limit(self.name, expire_time_ms)

    async def getRateLimitTtl(self, maxJobs: int | None = None) -> int:
        """Milliseconds until the rate limit ends, by Node's rule on every store: with
        `maxJobs` (or, without, the queue's global rate limit's `max`) the ttl when the
        limit is reached, else 0; with neither, the limit's ttl, -2 when there is none
        (on Redis the limiter key's PTTL, which counts a worker limiter's open window)."""
        if not maxJobs:
            limiter = (await self._meta()).get("global_limiter")
            maxJobs = int(limiter[0]) if limiter else None
        adapter = await self.backend.adapter()
        if maxJobs:
            return max(0, int(await adapter.get_rate_limit_ttl(self.name, maxJobs)))
        client, queue_key = self.client, getattr(adapter, "queue_key", None)
        if client is not None and queue_key is not None:  # Redis: the key's PTTL, as Node
            return int(await client.pttl(f"{queue_key(self.name)}:limiter"))
        ttl = int(await adapter.get_rate_limit_ttl(self.name, None))
        return ttl if ttl > 0 else NO_RATE_LIMIT

    async def removeRateLimitKey(self) -> int:
        """End a rate limit now; 1 when there was one."""
        adapter = await self.backend.adapter()
        return int(await adapter.remove_rate_limit_key(self.name))

    async def _meta(self) -> QueueMeta:
        adapter = await self.backend.adapter()
        return await adapter.get_queue_meta(self.name)

    async def setGlobalConcurrency(self, concurrency: int) -> None:
        await self._core.set_global_concurrency(concurrency)

    async def getGlobalConcurrency(self) -> int | None:
        value = (await self._meta()).get("global_concurrency")
        return None if value is None else int(value)

    async def removeGlobalConcurrency(self) -> int:
        had = await self.getGlobalConcurrency() is not None
        adapter = await self.backend.adapter()
        await adapter.set_global_concurrency(self.name, None)
        return int(had)

    async def setGlobalRateLimit(self, max_jobs: int, duration_ms: int) -> None:
        await self._core.set_global_rate_limit(max_jobs, duration_ms)

    async def getGlobalRateLimit(self) -> dict[str, int] | None:
        limiter = (await self._meta()).get("global_limiter")
        return None if not limiter else {"max": int(limiter[0]), "duration": int(limiter[1])}

    async def removeGlobalRateLimit(self) -> int:
        """2 when a limit was removed (its `max` and `duration`), else 0."""
        had = await self.getGlobalRateLimit() is not None
        adapter = await self.backend.adapter()
        await adapter.set_global_rate_limit(self.name, None)
        return 2 if had else 0

    # ------------------------------------------------------------------ deduplication
    async def getDeduplicationJobId(self, id: str) -> str | None:
        job_id: str | None = await self._core.get_deduplication_job_id(id)
        return job_id

    getDebounceJobId = getDeduplicationJobId

    async def removeDeduplicationKey(self, id: str) -> int:
        return int(await self._core.remove_deduplication_key(id))

    # ------------------------------------------------------------------ job schedulers
    @property
    def jobScheduler(self) -> JobScheduler:
        """The JobScheduler of this queue (made on first use)."""
        if self._job_scheduler is None:
            from psyq.compat.bullmq.job_scheduler import JobScheduler

            self._job_scheduler = JobScheduler(self)
        return self._job_scheduler

    async def upsertJobScheduler(
        self,
        job_scheduler_id: str,
        repeat_opts: Mapping[str, Any],
        job_name: str | Mapping[str, Any] | None = None,
        job_data: Any = None,
        opts: Mapping[str, Any] | None = None,
        override: bool = True,
        producer_id: str | None = None,
    ) -> Job | None:
        """Create or replace a scheduler. Its template: the Python package's keyword
        arguments `job_name`, `job_data`, `opts`, or Node's third argument
        `{"name", "data", "opts"}`."""
        if isinstance(job_name, Mapping):
            job_name, job_data, opts = _node_template(job_name, job_data, opts)
        return await self.jobScheduler.upsertJobScheduler(
            job_scheduler_id,
            repeat_opts,
            job_name or job_scheduler_id,
            job_data,
            opts,
            override=override,
            producer_id=producer_id,
        )

    async def removeJobScheduler(self, job_scheduler_id: str) -> int:
        return await self.jobScheduler.removeJobScheduler(job_scheduler_id)

    async def isJobScheduler(self, job_scheduler_id: str) -> bool:
        return await self.jobScheduler.isJobScheduler(job_scheduler_id)

    async def getJobScheduler(self, job_scheduler_id: str) -> dict[str, Any] | None:
        return await self.jobScheduler.getScheduler(job_scheduler_id)

    async def getJobSchedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[dict[str, Any]]:
        return await self.jobScheduler.getJobSchedulers(start, end, asc)

    async def getJobSchedulersCount(self) -> int:
        return await self.jobScheduler.getSchedulersCount()


def _node_template(
    template: Mapping[str, Any], job_data: Any, opts: Mapping[str, Any] | None
) -> tuple[str | None, Any, Mapping[str, Any] | None]:
    """(name, data, opts) of Node's job template `{"name", "data", "opts"}`; refused when
    the keyword form is given beside it."""
    unknown = sorted(set(template) - {"name", "data", "opts"})
    if unknown:
        raise ValueError(f"a job template has keys name, data and opts; got {unknown}")
    if job_data is not None or opts is not None:
        raise ValueError(
            "give the template either as Node's {name, data, opts} or as the keyword "
            "arguments job_name, job_data and opts, not both"
        )
    return template.get("name"), template.get("data"), template.get("opts")
