"""`Job` as the `bullmq` package shows it: camelCase attributes (`attemptsMade`,
`returnvalue`, `processedOn`, ...) and methods, each mapped onto a psyq core `Job`.

Attributes are a snapshot, refreshed by this object's own calls, as in `bullmq`.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Mapping
from typing import Any

from psyq.backends.base import FetchRequest, JobRecord
from psyq.backends.redis.jobs import record_from_hash
from psyq.core.job import Job as CoreJob
from psyq.core.job import QueueRef
from psyq.errors import JobNotFoundError, JobStateError, PsyqError
from psyq.rules import codec

__all__ = ["Job", "next_job_data", "raw_job_data"]

# The short option names BullMQ stores, and their public names.
_OPTS_DECODE = {
    "fpof": "failParentOnFailure",
    "cpof": "continueParentOnFailure",
    "idof": "ignoreDependencyOnFailure",
    "rdof": "removeDependencyOnFailure",
    "kl": "keepLogs",
    "de": "deduplication",
}


def decode_opts(opts: Mapping[str, Any]) -> dict[str, Any]:
    return {_OPTS_DECODE.get(key, key): value for key, value in opts.items()}


def _now_ms() -> int:
    return round(time.time() * 1000)


class Job:
    """A job of a queue, with the `bullmq` package's names."""

    def __init__(
        self,
        queue: Any,
        name: str,
        data: Any = None,
        opts: Mapping[str, Any] | None = None,
        job_id: str | None = None,
    ) -> None:
        opts = dict(opts or {})
        self.queue = queue
        self.backend = getattr(queue, "backend", None)
        self.name = name
        self.data = data
        self.opts = opts
        self.id: str | None = opts.get("jobId") or job_id
        self.progress: Any = 0
        self.timestamp: int = opts.get("timestamp", _now_ms())
        self.delay: int = opts.get("delay", 0)
        self.priority: int = opts.get("priority", 0)
        self.attempts: int = opts.get("attempts", 1)
        self.attemptsMade = 0
        self.attemptsStarted = 0
        self.stalledCounter = 0
        self.processedOn: int | None = 0
        self.finishedOn: int | None = 0
        self.returnvalue: Any = None
        self.failedReason: str | None = None
        self.stacktrace: list[str] = []
        self.deferredFailure: str | None = None
        self.repeatJobKey: str | None = None
        self.token: str | None = None
        self.discarded = False
        parent = opts.get("parent")
        self.parentKey: str | None = f"{parent['queue']}:{parent['id']}" if parent else None
        self.parent = {"id": parent["id"], "queueKey": parent["queue"]} if parent else None
        self.removeOnComplete = opts.get("removeOnComplete", True)
        self.removeOnFail = opts.get("removeOnFail", False)
        self.queueQualifiedName: str = getattr(queue, "qualifiedName", "")
        self._core: CoreJob | None = None

    @property
    def deduplication_id(self) -> str | None:
        """The id of the job's `deduplication` option (None without one)."""
        deduplication = self.opts.get("deduplication") or self.opts.get("de")
        return deduplication.get("id") if isinstance(deduplication, Mapping) else None

    def __repr__(self) -> str:
        return f"<bullmq Job {self.queueQualifiedName}:{self.id} {self.name!r}>"

    # ------------------------------------------------------------------ the core job
    @classmethod
    def wrap(cls, queue: Any, core: CoreJob) -> Job:
        job = cls(queue, core.name, None, {})
        job._core = core
        job.sync()
        return job

    def sync(self) -> None:
        """Copy the core job's snapshot into the camelCase attributes."""
        core = self.core
        self.id, self.name = core.id, core.name
        self.data = core.data
        self.opts = decode_opts(core.opts)
        self.progress = core.progress
        self.timestamp, self.delay, self.priority = core.timestamp, core.delay, core.priority
        self.attempts = self.opts.get("attempts", 1)
        self.attemptsMade, self.attemptsStarted = core.attempts_made, core.attempts_started
        self.stalledCounter = core.stalled_counter
        self.processedOn = core.processed_on or 0
        self.finishedOn = core.finished_on or 0
        self.returnvalue = codec.loads(core._returnvalue_json)
        self.failedReason = core.failed_reason
        self.stacktrace = list(core.stacktrace)
        self.token = core.token
        self.repeatJobKey = self.opts.get("repeatJobKey") or _scheduler_key(core.id)
        if core.parent_key:
            self.parentKey = core.parent_key
            queue_key, _, parent_id = core.parent_key.rpartition(":")
            self.parent = {"id": parent_id, "queueKey": queue_key}

    @property
    def core(self) -> CoreJob:
        if self._core is None:
            raise PsyqError(f"job {self.name!r} has not been added to a queue")
        return self._core

    async def _refresh(self) -> None:
        try:
            self._core = await self.core.refresh()
        except JobNotFoundError:
            return  # removed on completion: the snapshot is what there is
        self.sync()

    # ------------------------------------------------------------------ updates
    async def updateProgress(self, progress: Any) -> None:
        """Set the progress; a Queue's job emits `progress(job, progress)` on it (as Node;
        a Worker's job emits it on the worker)."""
        await self.core.update_progress(progress)
        self.progress = progress
        self._on_queue("progress", progress)

    def _on_queue(self, event: str, *args: Any) -> None:
        """Emit what Node's Job emits on its queue, when the job's queue is a Queue."""
        notify = getattr(self.queue, "_job_event", None)
        if notify is not None:
            notify(event, self, *args)

    async def log(self, logRow: str) -> int:
        return await self.core.log(logRow)

    async def updateData(self, data: Any) -> None:
        try:
            await self.core.update_data(data)
        except JobNotFoundError:
            raise TypeError(f"Missing key for job {self.id}. updateData") from None
        self.data = data

    async def promote(self) -> None:
        await self.core.promote()
        self.delay = 0

    async def changeDelay(self, delay: int) -> None:
        await self.core.change_delay(delay)
        self.delay = delay

    async def changePriority(self, opts: Mapping[str, Any]) -> None:
        priority = opts.get("priority", 0)
        await self.core.change_priority(priority, bool(opts.get("lifo", False)))
        self.priority = priority

    async def retry(self, state: str = "failed", opts: Mapping[str, Any] | None = None) -> None:
        """Move a failed or completed job back to waiting; `opts` may reset its counters
        (`resetAttemptsMade`, `resetAttemptsStarted`)."""
        opts = opts or {}
        made, started = bool(opts.get("resetAttemptsMade")), bool(opts.get("resetAttemptsStarted"))
        await self.core.retry(state, reset_attempts_made=made, reset_attempts_started=started)
        self.failedReason = None
        self.finishedOn = self.processedOn = None
        self.returnvalue = None
        if made:
            self.attemptsMade = 0
        if started:
            self.attemptsStarted = 0

    async def remove(self, opts: Mapping[str, Any] | None = None) -> None:
        try:
            await self.core.remove(bool((opts or {}).get("removeChildren", True)))
        except JobStateError:
            raise Exception(
                f"Job {self.id} could not be removed because it is locked by another worker"
            ) from None
        self._on_queue("removed")

    def discard(self) -> None:
        self.discarded = True
        self.core.discard()

    async def extendLock(self, token: str, duration: int) -> None:
        await self.core.extend_lock(token, duration)

    # ------------------------------------------------------------------ state
    async def getState(self) -> str:
        state = await self.core.get_state()
        return "waiting" if state == "paused" else state

    async def _is(self, *states: str) -> bool:
        return await self.getState() in states

    async def isCompleted(self) -> bool:
        return await self._is("completed")

    async def isFailed(self) -> bool:
        return await self._is("failed")

    async def isDelayed(self) -> bool:
        return await self._is("delayed")

    async def isActive(self) -> bool:
        return await self._is("active")

    async def isWaiting(self) -> bool:
        return await self._is("waiting", "paused")

    async def isWaitingChildren(self) -> bool:
        return await self._is("waiting-children")

    async def isInZSet(self, set: str) -> bool:
        return await self._is(*_STATES_OF.get(set, (set,)))

    isInList = isInZSet

    def updateStacktrace(self) -> None:
        """Add the exception being handled to `stacktrace` (kept to `stackTraceLimit`)."""
        trace = traceback.format_exc()
        limit = self.opts.get("stackTraceLimit")
        if trace and trace != "NoneType: None\n":
            self.stacktrace.append(trace)
        if limit == 0:
            self.stacktrace = []
        elif limit:
            self.stacktrace = self.stacktrace[-limit:]

    # ------------------------------------------------------------------ locked transitions
    async def moveToCompleted(
        self,
        return_value: Any,
        token: str,
        fetchNext: bool = False,
    ) -> list[Any] | None:
        """Complete this active job; with fetchNext, returns the next job's data
        `[jobData, jobId, limitUntil, delayUntil]` (None when there is none)."""
        nxt = await self.core.move_to_completed(
            return_value, token, fetch_next=fetchNext, lock_duration=self._lock_duration()
        )
        attempts = self.core.attempts_made
        await self._refresh()
        self.returnvalue, self.attemptsMade = return_value, attempts
        self.finishedOn = self.finishedOn or _now_ms()
        return None if nxt is None else next_job_data(nxt)

    async def moveToFailed(
        self,
        err: BaseException,
        token: str,
        fetchNext: bool = False,
    ) -> list[Any] | None:
        """Fail this attempt: retried (after its backoff) while attempts remain, else failed.
        With fetchNext, takes and returns the next job's data as moveToCompleted does."""
        if self.discarded:
            self.core.discard()
        await self.core.move_to_failed(err, token)
        attempts, reason = self.core.attempts_made, self.core.failed_reason
        await self._refresh()
        self.attemptsMade, self.failedReason = attempts, reason
        if fetchNext:
            return await self._fetch_next(token)
        return None

    async def _fetch_next(self, token: str) -> list[Any] | None:
        ref = self.core._queue
        request = FetchRequest([token], self._lock_duration())
        records = await ref.backend.move_to_active(ref.name, request)
        return next_job_data(CoreJob(ref, records[0])) if records else None

    def _lock_duration(self) -> int:
        opts = getattr(self.queue, "opts", None) or {}
        return int(opts.get("lockDuration", 30_000))

    async def moveToDelayed(self, timestamp: int, token: str | None = None) -> None:
        """Delay this active job until `timestamp` (ms); then raise DelayedError."""
        await self.core.move_to_delayed(int(timestamp), token)
        self.delay = max(0, int(timestamp) - _now_ms())

    async def moveToWaitingChildren(
        self, token: str, opts: Mapping[str, Any] | None = None
    ) -> bool:
        """True when the job now waits for children (then raise WaitingChildrenError)."""
        return await self.core.move_to_waiting_children(token)

    # ------------------------------------------------------------------ flows
    async def getChildrenValues(self) -> dict[str, Any]:
        return await self.core.get_children_values()

    async def getFailedChildrenValues(self) -> dict[str, str]:
        return await self.core.get_failed_children_values()

    async def getDependencies(self, opts: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The job's children by kind; with Node's `opts` (`{"processed": {"cursor",
        "count"}, ...}`), a page of each kind asked, as Node pages them."""
        dependencies = await self.core.get_dependencies()
        if not opts or not any(opts.get(kind) for kind in _DEPENDENCY_KINDS):
            return dict(dependencies)
        return _dependency_pages(dependencies, opts)

    async def waitUntilFinished(self, queueEvents: Any, ttl: int | None = None) -> Any:
        """The return value once the job completes; raises once it fails."""
        return await self.core.wait_until_finished(queueEvents, None if ttl is None else ttl / 1000)

    # ------------------------------------------------------------------ reading
    @staticmethod
    async def fromId(queue: Any, jobId: str) -> Job | None:
        job: Job | None = await queue.getJob(jobId)
        return job

    @staticmethod
    async def addJobLog(queue: Any, jobId: str, logRow: str, keepLogs: int = 0) -> int:
        adapter = await queue.backend.adapter()
        count: int = await adapter.add_log(queue.name, str(jobId), str(logRow), keepLogs or None)
        return count

    @staticmethod
    def fromJSON(queue: Any, rawData: Any, jobId: str | None = None) -> Job:
        """A Job from a stored record, or the raw hash fields of one (the `jobData` of a
        fetch-next). Once `queue` (a Queue or a Worker) has its store open, the job is
        bound to it, so it can be settled (moveToCompleted, moveToFailed, ...)."""
        if isinstance(rawData, JobRecord):
            return Job.wrap(queue, CoreJob(queue.backend.ref(), rawData))
        raw = {_text(k): _text(v) for k, v in dict(rawData).items()}
        ref = _ref_of(queue)
        if ref is not None:
            job_id = str(jobId or raw.get("id") or "")
            return Job.wrap(queue, CoreJob(ref, record_from_hash(ref.name, job_id, raw)))
        opts = decode_opts(json.loads(raw.get("opts") or "{}"))
        job = Job(queue, raw.get("name", ""), json.loads(raw.get("data") or "null"), opts)
        job.id = jobId or raw.get("id")
        job.progress = json.loads(raw.get("progress") or "0")
        job.delay, job.priority = int(raw.get("delay") or 0), int(raw.get("priority") or 0)
        job.timestamp = int(raw.get("timestamp") or 0)
        job.processedOn = int(raw.get("processedOn") or 0)
        job.finishedOn = int(raw.get("finishedOn") or 0)
        job.attemptsMade = int(raw.get("atm") or raw.get("attemptsMade") or 0)
        job.attemptsStarted = int(raw.get("ats") or 0)
        job.stalledCounter = int(raw.get("stc") or 0)
        job.failedReason = raw.get("failedReason")
        job.stacktrace = json.loads(raw.get("stacktrace") or "[]")
        job.returnvalue = codec.loads(raw["returnvalue"]) if raw.get("returnvalue") else None
        job.repeatJobKey = raw.get("rjk") or _scheduler_key(job.id)
        return job

    # ------------------------------------------------------------------ Node BullMQ's own
    # (calls of Node BullMQ 6 that the Python package lacks: psyq.compat.bullmq.node_surface)
    @property
    def deduplicationId(self) -> str | None:
        return self.deduplication_id

    @property
    def queueName(self) -> str:
        return str(getattr(self.queue, "name", ""))

    @property
    def prefix(self) -> str:
        return str(getattr(self.queue, "prefix", None) or "bull")

    @property
    def processedBy(self) -> str | None:
        return None if self._core is None else self._core.processed_by

    @staticmethod
    async def create(
        queue: Any, name: str, data: Any = None, opts: Mapping[str, Any] | None = None
    ) -> Job:
        """Add a job to `queue` (as `queue.add`)."""
        job: Job = await queue.add(name, data, opts)
        return job

    @staticmethod
    async def createBulk(queue: Any, jobs: list[Mapping[str, Any]]) -> list[Job]:
        added: list[Job] = await queue.addBulk(jobs)
        return added

    @staticmethod
    def optsFromJSON(
        rawOpts: str | None = None, optsDecode: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Job options from their stored JSON, BullMQ's short names made long."""
        opts = json.loads(rawOpts or "{}")
        names = {**_OPTS_DECODE, **(optsDecode or {})}
        return {names.get(key, key): value for key, value in opts.items()}

    def asJSON(self) -> dict[str, Any]:
        """The job as BullMQ stores it: JSON-encoded `data`, `opts`, `returnvalue`,
        `stacktrace`, as Node's `asJSON` gives it."""
        fields = {
            "id": self.id,
            "name": self.name,
            "data": json.dumps(self.data, separators=(",", ":")),
            "opts": json.dumps(self.opts, separators=(",", ":")),
            "progress": self.progress,
            "attemptsMade": self.attemptsMade,
            "attemptsStarted": self.attemptsStarted,
            "finishedOn": self.finishedOn,
            "processedOn": self.processedOn,
            "timestamp": self.timestamp,
            "failedReason": json.dumps(self.failedReason),
            "stacktrace": json.dumps(self.stacktrace),
            "returnvalue": json.dumps(self.returnvalue),
            "parentKey": self.parentKey,
            "repeatJobKey": self.repeatJobKey,
            "deduplicationId": self.deduplicationId,
            "processedBy": self.processedBy,
        }
        return {key: value for key, value in fields.items() if value is not None}

    def toJSON(self) -> dict[str, Any]:
        """The job's fields (Node's `toJSON`: every field, none of the methods)."""
        return {name: getattr(self, name) for name in _JSON_FIELDS}

    async def clearLogs(self, keepLogs: int | None = None) -> None:
        """Remove the job's logs, keeping the newest `keepLogs`."""
        await self.core.clear_logs(keepLogs or 0)

    async def getIgnoredChildrenFailures(self) -> dict[str, str]:
        """{child key: failed reason} of the children that failed with
        `ignoreDependencyOnFailure`."""
        dependencies = await self.core.get_dependencies()
        return dict(dependencies.get("ignored") or {})

    async def getDependenciesCount(self, opts: Mapping[str, bool] | None = None) -> dict[str, int]:
        """How many children are processed / unprocessed / failed / ignored: the types
        `opts` sets true, else all four (as Node)."""
        kinds = [kind for kind, wanted in (opts or {}).items() if wanted]
        dependencies: Mapping[str, Any] = await self.core.get_dependencies()
        chosen = kinds or ["processed", "unprocessed", "ignored", "failed"]
        return {kind: len(dependencies.get(kind) or ()) for kind in chosen}

    async def removeUnprocessedChildren(self) -> None:
        """Remove the children (and their own children) not processed yet; a child being
        processed stays, as in Node."""
        dependencies = await self.core.get_dependencies()
        adapter = self.core._backend
        for key in dependencies.get("unprocessed") or ():
            queue, job_id = self._child_of(str(key))
            await adapter.remove_job(queue, job_id, True)

    def _child_of(self, key: str) -> tuple[str, str]:
        """(queue, id) of a child's job key (`<prefix>:<queue>:<id>`, or `<queue>:<id>`
        on a store without key prefixes)."""
        queue_key, _, job_id = key.rpartition(":")
        qualified, name = self.core.queue_qualified_name, self.core.queue_name
        prefix = qualified[: len(qualified) - len(name)]  # `<prefix>:`, or "" on Postgres
        return queue_key.removeprefix(prefix), job_id

    async def removeDeduplicationKey(self) -> bool:
        """Remove the job's deduplication key if it still names this job."""
        if not self.deduplicationId:
            return False
        adapter = self.core._backend
        removed = await adapter.remove_deduplication_key(
            self.core.queue_name, self.deduplicationId, self.id
        )
        return bool(removed)

    async def moveToWait(self, token: str | None = None) -> int:
        """Hand this active job back to waiting without using an attempt (after a manual
        rate limit); returns the queue's rate-limit ttl in ms (0 when none), as Node."""
        adapter = self.core._backend
        queue = self.core.queue_name
        await adapter.move_job_from_active_to_wait(queue, str(self.id), token or self.token or "0")
        return max(0, int(await adapter.get_rate_limit_ttl(queue, None)))


_DEPENDENCY_KINDS = ("processed", "unprocessed", "failed", "ignored")


def _dependency_pages(dependencies: Mapping[str, Any], opts: Mapping[str, Any]) -> dict[str, Any]:
    """Node's paged dependencies: for each kind `opts` asks for, `count` (default 20) of
    its children from `cursor` (default 0), and `next<Kind>Cursor` (0 once all are read).
    Processed children come with their decoded values, ignored ones with their reasons,
    failed and unprocessed ones as keys."""
    result: dict[str, Any] = {}
    for kind in _DEPENDENCY_KINDS:
        asked = opts.get(kind)
        if not asked:
            continue
        page = dict(asked) if isinstance(asked, Mapping) else {}
        cursor, count = int(page.get("cursor", 0)), int(page.get("count", 20))
        found = dependencies.get(kind) or ()
        keys = sorted(found)[cursor : cursor + count]
        end = cursor + len(keys)
        result[f"next{kind[0].upper()}{kind[1:]}Cursor"] = end if end < len(found) else 0
        if kind == "processed":
            result[kind] = {key: codec.loads(found[key]) for key in keys}
        elif kind == "ignored":
            result[kind] = {key: found[key] for key in keys}
        else:
            result[kind] = keys
    return result


# Node's `job.toJSON()`: every field, none of the methods.
_JSON_FIELDS = (
    "id",
    "name",
    "data",
    "opts",
    "progress",
    "delay",
    "priority",
    "timestamp",
    "attemptsMade",
    "attemptsStarted",
    "stalledCounter",
    "failedReason",
    "stacktrace",
    "returnvalue",
    "finishedOn",
    "processedOn",
    "parentKey",
    "parent",
    "repeatJobKey",
    "deduplicationId",
    "token",
    "processedBy",
    "queueQualifiedName",
)

# `bullmq`'s key names for states (`wait` is the waiting list).
_STATES_OF = {"wait": ("waiting", "paused"), "waiting": ("waiting", "paused")}


def _ref_of(queue: Any) -> QueueRef | None:
    """What a core job of `queue` settles through: a Worker's own (with its backoff
    strategies and events), else its open store; None while that is not open."""
    worker_ref = getattr(getattr(queue, "_core", None), "_ref", None)
    if isinstance(worker_ref, QueueRef):
        return worker_ref
    backend = getattr(queue, "backend", None)
    try:
        return None if backend is None else backend.ref()
    except PsyqError:
        return None


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _scheduler_key(job_id: str | None) -> str | None:
    """`repeat:<scheduler id>:<millis>` is an iteration of job scheduler <scheduler id>."""
    if not job_id or not job_id.startswith("repeat:"):
        return None
    key, _, millis = job_id[len("repeat:") :].rpartition(":")
    return key if key and millis.isdigit() else None


def raw_job_data(job: CoreJob) -> dict[str, Any]:
    """A job's fields as BullMQ's job hash holds them (text values)."""
    return {
        "name": job.name,
        "data": job._data_json,
        "opts": json.dumps(job.opts, separators=(",", ":")),
        "timestamp": str(job.timestamp),
        "delay": str(job.delay),
        "priority": str(job.priority),
        "atm": str(job.attempts_made),
        "ats": str(job.attempts_started),
        "processedOn": str(job.processed_on or 0),
    }


def next_job_data(job: CoreJob) -> list[Any]:
    """`[jobData, jobId, limitUntil, delayUntil]`, as `bullmq`'s fetch-next returns it."""
    return [raw_job_data(job), job.id, 0, 0]
