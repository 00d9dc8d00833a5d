"""`Queue`: add jobs and inspect or administer a queue."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, cast

from psyq.backends import open_backend, release_backend
from psyq.backends.base import (
    JOB_STATES,
    BackendAdapter,
    JobRecord,
    Limiter,
    Metrics,
    NewJob,
    SchedulerEntry,
)
from psyq.core import gate
from psyq.core.events import EventEmitter
from psyq.core.job import Job, QueueRef
from psyq.core.options import check_text, normalize_job_options
from psyq.core.queue_groups import GroupCalls
from psyq.errors import ClosedError, InvalidOptionsError
from psyq.plugins import AddSpec, PluginHost
from psyq.rules import codec
from psyq.rules.event_policy import check_event_policy
from psyq.rules.limits import check_int
from psyq.rules.prefix import DEFAULT_PREFIX
from psyq.rules.schedule import normalize_repeat

__all__ = ["Queue", "check_queue_name", "qualify_connection"]

FINISHED_STATES = ("completed", "failed")
_ENTRY_KEYS = frozenset({"name", "data", "opts"})
_NOT_IN_TEMPLATES = frozenset({"jobId", "delay", "deduplication", "parent"})
_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})  # an add_bulk entry's keyword options
CLEANABLE_STATES = ("completed", "failed", "delayed", "waiting", "prioritized", "paused")


def check_queue_name(name: Any, allow_empty: bool = False) -> str:
    if not isinstance(name, str) or (not name and not allow_empty) or ":" in name:
        raise InvalidOptionsError(
            f"queue name must be a non-empty string without ':', got {name!r}"
        )
    return check_text("queue name", name)


def qualify_connection(
    connection: str | BackendAdapter | None, prefix: str
) -> str | BackendAdapter | None:
    """Carry a non-default key prefix in the URL, so one backend instance serves one prefix."""
    if not isinstance(prefix, str) or not prefix or ":" in prefix:
        raise InvalidOptionsError(f"prefix must be a non-empty string without ':', got {prefix!r}")
    check_text("prefix", prefix)
    if prefix == DEFAULT_PREFIX or isinstance(connection, BackendAdapter):
        return connection
    from psyq.backends import resolve_url

    url = resolve_url(connection)
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


def _check_states(states: Iterable[str]) -> list[str]:
    result = list(states)
    for state in result:
        if state not in JOB_STATES:
            raise InvalidOptionsError(f"unknown job state {state!r}; known: {list(JOB_STATES)}")
    return result


class _BackendUser:
    """Shared by Queue and Worker: open the backend on first use, release it on close."""

    # The `bullmq` package (PyPI) accepts an empty queue name (keys `bull::wait`);
    # psyq.compat.bullmq's private subclasses set this, psyq's own API keeps refusing it.
    allow_empty_name: ClassVar[bool] = False

    def __init__(self, name: str, connection: str | BackendAdapter | None, prefix: str) -> None:
        self.name = check_queue_name(name, self.allow_empty_name)
        self.prefix = prefix
        self._connection = qualify_connection(connection, prefix)
        self._backend: BackendAdapter | None = None
        self._closed = False

    async def _open(self) -> BackendAdapter:
        if self._closed:
            raise ClosedError(f"{type(self).__name__} {self.name!r} is closed")
        if self._backend is None:
            backend = await open_backend(self._connection)
            if self._backend is None and not self._closed:
                self._backend = backend
            else:  # a concurrent call opened it, or close() ran meanwhile: give this use back
                if not isinstance(self._connection, BackendAdapter):
                    await release_backend(backend)
                if self._closed:
                    raise ClosedError(f"{type(self).__name__} {self.name!r} is closed")
        assert self._backend is not None
        return self._backend

    async def wait_until_ready(self) -> None:
        """Return once the connection to the store is open (BullMQ's `waitUntilReady`):
        a store that cannot be reached says so here, not at the first call."""
        await self._open()

    async def _release(self) -> None:
        self._closed = True
        backend, self._backend = self._backend, None
        if backend is not None and not isinstance(self._connection, BackendAdapter):
            await release_backend(backend)


class Queue(_BackendUser, GroupCalls, EventEmitter):
    """A named queue on a backend. Events: waiting(job), error(error)."""

    def __init__(
        self,
        name: str,
        connection: str | BackendAdapter | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: Mapping[str, Any] | None = None,
        plugins: Sequence[object] = (),
        events: str | None = None,
    ) -> None:
        """`events`: the queue's event policy, stored with it when the queue opens
        (`always` | `when-read`, psyq.rules.event_policy; None leaves what is stored)."""
        _BackendUser.__init__(self, name, connection, prefix)
        self._events = None if events is None else check_event_policy(events)
        EventEmitter.__init__(self)
        self.default_job_options = normalize_job_options(default_job_options)
        self._plugins = PluginHost(plugins)
        self._before_add = self._plugins.has_hook("psyq_before_add")
        self._job_added = self._plugins.has_hook("psyq_job_added")
        self._queue_ref: QueueRef | None = None  # one for every Job of this queue, once open

    async def __aenter__(self) -> Queue:
        await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._wait_listeners()
        await self._release()

    async def _open(self) -> BackendAdapter:
        backend = await super()._open()
        if self._events is not None:
            await backend.set_event_policy(self.name, self._events)
            self._events = None  # stored once: every process reads it from the store
        return backend

    async def _ref(self) -> QueueRef:
        ref = self._queue_ref
        if ref is None or self._closed:  # closed: _open raises
            ref = self._queue_ref = QueueRef(self.name, await self._open())
        return ref

    def _job(self, ref: QueueRef, record: JobRecord) -> Job:
        return Job(ref, record)

    # ------------------------------------------------------------------ adding
    async def add(
        self,
        name: str,
        data: Any = None,
        opts: Mapping[str, Any] | None = None,
        *,
        transaction: object = None,
        **kwargs: Any,
    ) -> Job:
        """Add one job. Options come as a mapping, keywords, or both (keywords win).
        `transaction`: a connection inside the application's open transaction to write the
        job on (Postgres only; docs/transactions.md)."""
        new = self._prepare(name, data, opts, kwargs)
        ref = self._queue_ref
        if ref is None or self._closed:
            ref = await self._ref()
        if transaction is not None:
            [job] = await self._add_in(ref, transaction, [new])
            return job
        [record] = await ref.backend.add_jobs(self.name, [new])
        job = Job(ref, record)
        if self._job_added or "waiting" in self._listeners:
            await self._added([job])
        return job

    async def add_bulk(
        self, jobs: Iterable[Mapping[str, Any]], *, transaction: object = None
    ) -> list[Job]:
        """Add many jobs atomically: all are written, or none. `transaction`: as in add."""
        prepared = [self._prepare_entry(i, entry) for i, entry in enumerate(jobs)]
        if transaction is not None:
            return await self._add_in(await self._ref(), transaction, prepared)
        if not prepared:
            return []
        ref = await self._ref()
        records = await ref.backend.add_jobs(self.name, prepared)
        added = [Job(ref, record) for record in records]
        if self._job_added or "waiting" in self._listeners:
            await self._added(added)
        return added

    async def _add_in(self, ref: QueueRef, transaction: object, jobs: list[NewJob]) -> list[Job]:
        """Add on the application's transaction. The add's local listeners and hooks are
        not called: the jobs exist only if the application commits (QueueEvents hears
        them then)."""
        records = await ref.backend.add_jobs_in(transaction, self.name, jobs)
        return [Job(ref, record) for record in records]

    def _prepare_entry(self, index: int, entry: Mapping[str, Any]) -> NewJob:
        if (type(entry) is not dict and not isinstance(entry, Mapping)) or "name" not in entry:
            raise InvalidOptionsError(f"add_bulk entry {index} needs a 'name': {entry!r}")
        if not _ENTRY_KEYS.issuperset(entry):
            unknown = set(entry) - _ENTRY_KEYS
            raise InvalidOptionsError(f"add_bulk entry {index} has unknown keys {sorted(unknown)}")
        return self._prepare(entry["name"], entry.get("data"), entry.get("opts"), _NO_KWARGS)

    def _prepare(
        self, name: Any, data: Any, opts: Mapping[str, Any] | None, kwargs: Mapping[str, Any]
    ) -> NewJob:
        if self._before_add:
            spec = AddSpec(self.name, name, data, {**(opts or {}), **kwargs})
            self._plugins.before_add(spec)
            name, data, opts, kwargs = spec.name, spec.data, spec.opts, {}
        return gate.new_job(name, data, opts, kwargs, self.default_job_options)

    async def _added(self, jobs: list[Job]) -> None:
        """What follows an add when someone listens: `waiting` events, `psyq_job_added`."""
        if self._listeners.get("waiting"):
            for job in jobs:
                self.emit("waiting", job)
        if self._job_added:
            for job in jobs:
                await self._report(await self._plugins.notify("psyq_job_added", job=job))

    async def _report(self, errors: list[BaseException]) -> None:
        for error in errors:
            self.emit("error", error)

    # ------------------------------------------------------------------ reading
    async def get_job(self, job_id: str) -> Job | None:
        ref = await self._ref()
        record = await ref.backend.get_job(self.name, str(job_id))
        return None if record is None else Job(ref, record)

    async def get_job_state(self, job_id: str) -> str:
        return await (await self._open()).get_state(self.name, str(job_id))

    async def get_jobs(
        self,
        types: str | Sequence[str] | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        states = _check_states([types] if isinstance(types, str) else types or JOB_STATES)
        ref = await self._ref()
        records = await ref.backend.get_jobs(self.name, states, start, end, asc)
        return [Job(ref, record) for record in records]

    async def get_job_counts(self, *types: str) -> dict[str, int]:
        states = _check_states(types or JOB_STATES)
        return await (await self._open()).get_job_counts(self.name, states)

    async def get_job_count_by_types(self, *types: str) -> int:
        return sum((await self.get_job_counts(*types)).values())

    async def count(self) -> int:
        """Jobs still to be processed: waiting, paused, delayed, prioritized, waiting-children."""
        return await self.get_job_count_by_types(
            "waiting", "paused", "delayed", "prioritized", "waiting-children"
        )

    async def get_waiting(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.get_jobs(["waiting"], start, end, asc=True)

    async def get_active(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.get_jobs(["active"], start, end, asc=True)

    async def get_delayed(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.get_jobs(["delayed"], start, end, asc=True)

    async def get_prioritized(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.get_jobs(["prioritized"], start, end, asc=True)

    async def get_completed(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.get_jobs(["completed"], start, end)

    async def get_failed(self, start: int = 0, end: int = -1) -> list[Job]:
        return await self.get_jobs(["failed"], start, end)

    async def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> dict[str, Any]:
        backend = await self._open()
        logs, count = await backend.get_job_logs(self.name, str(job_id), start, end, asc)
        return {"logs": logs, "count": count}

    async def is_paused(self) -> bool:
        return await (await self._open()).is_paused(self.name)

    # ------------------------------------------------------------------ admin
    async def pause(self) -> None:
        await (await self._open()).pause(self.name)

    async def resume(self) -> None:
        await (await self._open()).resume(self.name)

    async def drain(self, delayed: bool = False) -> None:
        await (await self._open()).drain(self.name, delayed)

    async def clean(self, grace: int, limit: int = 0, type: str = "completed") -> list[str]:
        """Remove up to `limit` jobs (0 = all) in state `type` older than `grace` ms."""
        check_int("grace", grace)
        check_int("limit", limit)
        if type not in CLEANABLE_STATES:
            raise InvalidOptionsError(
                f"cannot clean state {type!r}; choose from {CLEANABLE_STATES}"
            )
        return await (await self._open()).clean(self.name, grace, limit, type)

    async def obliterate(self, force: bool = False) -> None:
        await (await self._open()).obliterate(self.name, force)

    async def remove(self, job_id: str, remove_children: bool = True) -> bool:
        """Remove a job; False when it does not exist, is being processed, or is a job
        scheduler's pending run (removing the scheduler removes that)."""
        return await (await self._open()).remove_job(self.name, str(job_id), remove_children)

    async def retry_jobs(
        self, state: str = "failed", count: int = 0, timestamp: int | None = None
    ) -> int:
        if state not in FINISHED_STATES:
            raise InvalidOptionsError(
                f"retry_jobs state must be one of {FINISHED_STATES}, got {state!r}"
            )
        backend = await self._open()
        before = await backend.now_ms() if timestamp is None else timestamp
        return await backend.retry_jobs(self.name, state, check_int("count", count), before)

    async def promote_jobs(self, count: int = 0) -> int:
        return await (await self._open()).promote_jobs(self.name, check_int("count", count))

    # ------------------------------------------------------------------ job schedulers
    async def upsert_job_scheduler(
        self,
        scheduler_id: str,
        repeat: Mapping[str, Any],
        template: Mapping[str, Any] | None = None,
    ) -> Job | None:
        """Create or replace scheduler `scheduler_id`; returns its pending job (None when
        its spec allows no run). `template`: {"name", "data", "opts"} of the jobs it makes."""
        if not isinstance(scheduler_id, str) or not scheduler_id:
            raise InvalidOptionsError(f"scheduler id must be a non-empty string: {scheduler_id!r}")
        check_text("scheduler id", scheduler_id)
        spec = normalize_repeat(repeat)
        new = self._template(scheduler_id, template)
        ref = await self._ref()
        record = await ref.backend.upsert_job_scheduler(self.name, scheduler_id, spec, new)
        return None if record is None else Job(ref, record)

    def _template(self, scheduler_id: str, template: Mapping[str, Any] | None) -> NewJob:
        template = dict(template or {})
        unknown = set(template) - _ENTRY_KEYS
        if unknown:
            raise InvalidOptionsError(f"scheduler template has unknown keys {sorted(unknown)}")
        new = self._prepare(
            template.get("name", scheduler_id), template.get("data"), template.get("opts"), {}
        )
        banned = sorted(set(new.opts) & _NOT_IN_TEMPLATES)
        if banned:
            raise InvalidOptionsError(f"a scheduler template cannot set {banned}", option=banned[0])
        return new

    async def get_job_scheduler(self, scheduler_id: str) -> dict[str, Any] | None:
        entry = await (await self._open()).get_job_scheduler(self.name, scheduler_id)
        return None if entry is None else _decoded_template(entry)

    async def get_job_schedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[dict[str, Any]]:
        entries = await (await self._open()).get_job_schedulers(self.name, start, end, asc)
        return [_decoded_template(entry) for entry in entries]

    async def get_job_schedulers_count(self) -> int:
        return len(await self.get_job_schedulers())

    async def remove_job_scheduler(self, scheduler_id: str) -> bool:
        return await (await self._open()).remove_job_scheduler(self.name, scheduler_id)

    # ------------------------------------------------------------------ dedup, metrics, control
    async def get_deduplication_job_id(self, deduplication_id: str) -> str | None:
        backend = await self._open()
        return await backend.get_deduplication_job_id(self.name, deduplication_id)

    async def remove_deduplication_key(self, deduplication_id: str) -> bool:
        backend = await self._open()
        return await backend.remove_deduplication_key(self.name, deduplication_id)

    async def get_metrics(self, kind: str, start: int = 0, end: int = -1) -> Metrics:
        """Jobs finished per minute: {"meta": {"count"}, "data": [newest first], "count"}."""
        if kind not in FINISHED_STATES:
            raise InvalidOptionsError(f"metrics kind must be one of {FINISHED_STATES}: {kind!r}")
        return await (await self._open()).get_metrics(self.name, kind, start, end)

    async def get_counts_per_priority(self, priorities: Sequence[int]) -> dict[str, int]:
        for priority in priorities:
            check_int("priority", priority)
        return await (await self._open()).get_counts_per_priority(self.name, list(priorities))

    async def set_max_len_events(self, max_len: int) -> None:
        """Keep at most `max_len` events in the queue's event log (default 10,000)."""
        check_int("max_len", max_len, minimum=1)
        await (await self._open()).set_max_len_events(self.name, max_len)

    async def get_workers(self) -> list[dict[str, Any]]:
        return await (await self._open()).get_workers(self.name)

    async def cancel_job(self, job_id: str, reason: str = "cancelled") -> bool:
        """Ask the worker running `job_id` to stop it (cooperative: an async processor is
        cancelled, a thread sees `job.cancelled`); False when the job is not active."""
        check_text("reason", reason)
        return await (await self._open()).cancel_job(self.name, str(job_id), reason)

    async def set_global_concurrency(self, concurrency: int) -> None:
        check_int("concurrency", concurrency, minimum=1)
        await (await self._open()).set_global_concurrency(self.name, concurrency)

    async def set_global_rate_limit(self, max_jobs: int, duration: int) -> None:
        limiter = Limiter(
            check_int("max", max_jobs, minimum=1), check_int("duration", duration, minimum=1)
        )
        await (await self._open()).set_global_rate_limit(self.name, limiter)

    async def rate_limit(self, expire_time_ms: int) -> None:
        """Hold the whole queue for `expire_time_ms` (as a worker's rate limit does)."""
        check_int("expire_time_ms", expire_time_ms)
        await (await self._open()).rate_limit(self.name, expire_time_ms)

    async def get_rate_limit_ttl(self, max_jobs: int | None = None) -> int:
        """Milliseconds until the queue's rate limit ends, 0 when it is not limited (with
        `max_jobs`: 0 while fewer than that many jobs started in the limiter's window)."""
        if max_jobs is not None:
            check_int("max_jobs", max_jobs, minimum=1)
        return max(0, await (await self._open()).get_rate_limit_ttl(self.name, max_jobs))

    async def remove_rate_limit_key(self) -> bool:
        """End the queue's rate limit now; True when the queue was rate-limited."""
        return await (await self._open()).remove_rate_limit_key(self.name)


def _decoded_template(entry: SchedulerEntry) -> dict[str, Any]:
    """A scheduler entry with its template's data as a value, as a job's data is (stores
    keep it as JSON text), as BullMQ's getJobScheduler returns it."""
    template = entry.get("template")
    if isinstance(template, dict) and isinstance(template.get("data"), str):
        return {**entry, "template": {**template, "data": codec.loads(template["data"])}}
    return cast("dict[str, Any]", entry)
