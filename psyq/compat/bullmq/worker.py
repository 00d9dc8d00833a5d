"""`Worker(name, processor, opts)`: the `bullmq` package's Worker over psyq's core Worker.

The processor is called as `processor(job, token)`, or `processor(job, token, signal)` when
it takes a third parameter (an AbortSignal that `worker.cancelJob` aborts), or it runs in a
sandbox when it is a processor file's path (sandboxed.py). Events and their arguments are
`bullmq`'s: active(job, prev), completed(job, result), failed(job, error), progress(job,
progress), stalled(jobId), drained(), error(error), paused(), resumed(); `completed`,
`failed` and `stalled` give Node's last argument, prev, to a listener that names it
(listeners.py). Node's own: ready() once the connection is open, closing(msg) and closed()
around close(), locksRenewed({count, jobIds}) after each renewal, lockRenewalFailed(ids).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from psyq.backends.base import Limiter
from psyq.compat.bullmq._core import CoreWorker
from psyq.compat.bullmq.abort_controller import AbortController
from psyq.compat.bullmq.backend import Backend, create_backend, redis_client, store_of
from psyq.compat.bullmq.job import Job
from psyq.compat.bullmq.job_scheduler import JobScheduler
from psyq.compat.bullmq.listeners import ListenerArguments
from psyq.compat.bullmq.node_worker import NodeWorkerCalls, check_max_started_attempts
from psyq.compat.bullmq.sandboxed import sandbox_for
from psyq.compat.bullmq.worker_fetch import (  # the bullmq package's tests import both here
    WorkerFetchCalls,
    _postgres_connection_error_types,  # noqa: F401
    getCompleted,
)
from psyq.core.backoff import BackoffStrategy, registered_backoff_strategy
from psyq.core.job import Job as CoreJob
from psyq.core.worker import RENEW_LOCK
from psyq.errors import ClosedError, InvalidOptionsError, LockError, RateLimitError
from psyq.rules.prefix import DEFAULT_PREFIX
from psyq.sandbox import Sandbox

__all__ = ["Worker", "getCompleted"]

DEFAULT_MAXIMUM_BLOCK_TIMEOUT = 10

DEFAULT_OPTS: dict[str, Any] = {
    "drainDelay": 5,
    "concurrency": 1,
    "lockDuration": 30_000,
    "maxStalledCount": 1,
    "stalledInterval": 30_000,
    "runRetryDelay": 15_000,
}
# Worker options the layer takes but does not apply yet (docs/porting.md), each with what
# to do instead.
NOT_APPLIED = {"useWorkerThreads": "run CPU-bound processors in psyq.sandbox.Sandbox"}


def _positional_count(processor: Any) -> int:
    """How many positional arguments `processor` takes (a large number for *args)."""
    if processor is None:
        return 0
    try:
        params = inspect.signature(processor).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 99
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


class _AnyBackoff(Mapping[str, BackoffStrategy]):
    """`settings.backoffStrategy`: one function for every custom backoff type."""

    def __init__(self, strategy: BackoffStrategy) -> None:
        self._strategy = strategy

    def __getitem__(self, kind: str) -> BackoffStrategy:
        return self._strategy

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:  # not empty: every key has the strategy
        return True


class _NoBackoffStrategy(Mapping[str, BackoffStrategy]):
    """A Worker without `settings.backoffStrategy`: a custom backoff type it meets is
    refused naming that option (psyq's registry, when it has the type, still answers)."""

    def __getitem__(self, kind: str) -> BackoffStrategy:
        strategy = registered_backoff_strategy(kind)
        if strategy is not None:
            return strategy
        raise InvalidOptionsError(
            f"unknown backoff strategy {kind!r}; give the Worker "
            "settings={'backoffStrategy': fn}, fn(attemptsMade, type, err, job) returning "
            "the delay in ms",
            option="backoff",
        )

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:  # asked, not skipped as an empty mapping would be
        return True


def _limiter(value: Any) -> Limiter | None:
    if not value:
        return None
    return Limiter(int(value["max"]), int(value["duration"]))


class Worker(WorkerFetchCalls, NodeWorkerCalls):
    """Processes the jobs of queue `name`, with the `bullmq` package's names."""

    RateLimitError = RateLimitError  # raised after worker.rateLimit(ms), as in Node BullMQ

    def __init__(
        self,
        name: str,
        processor: Callable[..., Any] | str | os.PathLike[str] | None = None,
        opts: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._listener_arguments = ListenerArguments()
        given = dict(opts or {})
        for option in NOT_APPLIED.keys() & given.keys():
            warnings.warn(
                f"Worker option {option}={given[option]!r} is not applied by psyq yet: "
                f"{NOT_APPLIED[option]}",
                stacklevel=2,
            )
        self.name = name
        self.opts: dict[str, Any] = {**DEFAULT_OPTS, **given}
        # Node's sandboxed form, a processor file: run in child processes the worker owns
        self._own_sandbox: Sandbox | None = None
        if isinstance(processor, str | os.PathLike):
            processor = self._own_sandbox = sandbox_for(processor, int(self.opts["concurrency"]))
        self.processor: Callable[..., Any] | None = processor
        check_max_started_attempts(self.opts)
        self.opts.setdefault("lockRenewTime", self.opts["lockDuration"] // 2)
        self.backend = create_backend(name, self.opts, with_blocking_connection=True)
        self.keys = getattr(self.backend, "keys", None)
        self.prefix = self.opts.get("prefix", DEFAULT_PREFIX)
        self.workerName: str | None = given.get("name")
        suffix = f":w:{self.workerName}" if self.workerName else ""
        self.clientName = self.backend.clientName(suffix)
        self.id = uuid.uuid4().hex
        self.closing = self.forceClosing = self.closed = False
        self.blockUntil = self.limitUntil = 0
        self.drained = False
        self._job_scheduler: JobScheduler | None = None
        self._arity = _positional_count(processor)
        self._controllers: dict[str, AbortController] = {}
        self._jobs: dict[str, tuple[CoreJob, Job]] = {}
        self._core = self._core_worker(name, processor is not None)
        self._forward_events()
        self._close_task: asyncio.Future[None] | None = None
        self._ready_task = self._announce_ready()
        self._run_task: asyncio.Future[None] | None = None
        if processor is not None and self.opts.get("autorun", True):
            self._run_task = asyncio.ensure_future(self.run())

    def _core_worker(self, name: str, with_processor: bool) -> CoreWorker:
        opts = self.opts
        worker = CoreWorker(
            name,
            self._process if with_processor else None,
            store_of(self.backend, opts),
            concurrency=int(opts["concurrency"]),
            limiter=_limiter(opts.get("limiter")),
            lock_duration=int(opts["lockDuration"]),
            lock_renew_time=int(opts["lockRenewTime"]) or None,
            stalled_interval=int(opts["stalledInterval"]),
            max_stalled_count=int(opts["maxStalledCount"]),
            drain_delay=float(opts["drainDelay"]),
            autorun=False,
            prefix=str(self.prefix),
            worker_name=self.workerName,
            skip_stalled_check=bool(opts.get("skipStalledCheck", False)),
            skip_lock_renewal=bool(opts.get("skipLockRenewal", False)),
            remove_on_complete=opts.get("removeOnComplete"),
            remove_on_fail=opts.get("removeOnFail"),
        )
        strategy = (opts.get("settings") or {}).get("backoffStrategy")
        if strategy is not None:
            # every custom backoff type goes to the one function bullmq takes
            worker._strategies = _AnyBackoff(self._backoff(strategy))  # type: ignore[assignment]
        else:
            worker._strategies = _NoBackoffStrategy()  # type: ignore[assignment]
        return worker

    def _backoff(self, strategy: Callable[..., Any]) -> BackoffStrategy:
        def call(attempts: int, kind: str, error: BaseException | None, job: Any) -> Any:
            return strategy(attempts, kind, error, self._wrap(job))

        return call

    # ------------------------------------------------------------------ compat handles
    @property
    def concurrency(self) -> int:
        """How many jobs this worker runs at once; set while it runs, it takes effect at
        once (as in Node BullMQ). A value that is not a whole number >= 1 is refused."""
        return self._core.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self._core.concurrency = value
        self.opts["concurrency"] = value

    @property
    def qualifiedName(self) -> str:
        return str(self.backend.qualifiedName)

    @property
    def redisConnection(self) -> Any:
        """The redis-py client once the worker runs on Redis, else None."""
        if not isinstance(self.backend, Backend):
            return None
        return redis_client(self._core._backend or self.backend.core._backend, self.backend.url)

    @property
    def blockingRedisConnection(self) -> Any:
        return self.redisConnection

    @property
    def client(self) -> Any:
        return self.redisConnection

    async def waitUntilReady(self) -> Any:
        """Resolve once the worker's connection is open: its redis-py client on Redis,
        else None."""
        await self._core.wait_until_ready()
        return self.redisConnection

    @property
    def running(self) -> bool:
        return bool(self._core.running)

    def isRunning(self) -> bool:
        return self.running

    @property
    def paused(self) -> bool:
        return bool(self._core.paused)

    def isPaused(self) -> bool:
        return self.paused

    @property
    def minimumBlockTimeout(self) -> float:
        return float(getattr(self.backend, "minimumBlockTimeout", 0.001))

    @property
    def maximumBlockTimeout(self) -> float:
        return float(getattr(self.backend, "maximumBlockTimeout", DEFAULT_MAXIMUM_BLOCK_TIMEOUT))

    @property
    def jobScheduler(self) -> JobScheduler:
        """The JobScheduler of this worker's queue (made on first use)."""
        if self._job_scheduler is None:
            self._job_scheduler = JobScheduler(self)
        return self._job_scheduler

    # ------------------------------------------------------------------ jobs and events
    def _wrap(self, core: CoreJob) -> Job:
        """The bullmq Job for a core job (the same object while the job is processed)."""
        entry = self._jobs.get(core.id)
        if entry is not None and entry[0] is core:
            entry[1].sync()
            return entry[1]
        job = Job.wrap(self, core)
        self._jobs[core.id] = (core, job)
        return job

    def _forget(self, core: CoreJob) -> Job:
        job = self._wrap(core)
        self._jobs.pop(core.id, None)
        return job

    def _call_listener(
        self, event: str, listener: Callable[..., Any], args: tuple[Any, ...]
    ) -> Any:
        """A listener gets the event's arguments it declares: Node's `prev` of `completed`
        and `failed` only when it names a third parameter (listeners.py)."""
        return listener(*self._listener_arguments.fit(event, listener, args))

    def _forward_events(self) -> None:
        core = self._core
        core.on("active", lambda job, prev: self.emit("active", self._wrap(job), prev))
        core.on(
            "completed",
            lambda job, result: self.emit("completed", self._forget(job), result, "active"),
        )
        core.on(
            "failed", lambda job, error: self.emit("failed", self._forget(job), error, "active")
        )
        core.on("progress", lambda job, value: self.emit("progress", self._wrap(job), value))
        core.on("stalled", lambda job_id, prev: self.emit("stalled", job_id, prev))
        core.on("drained", lambda: self.emit("drained"))
        core.on("error", self._forward_error)
        core.on("paused", lambda: self.emit("paused"))
        core.on("resumed", lambda: self.emit("resumed"))
        core.on("locksRenewed", lambda renewed: self.emit("locksRenewed", renewed))

    def _announce_ready(self) -> asyncio.Task[None] | None:
        """Emit `ready` once the worker's connection is open, as Node's constructor does
        (made outside an event loop, the worker opens it at its first call: no event)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return loop.create_task(self._ready())

    async def _ready(self) -> None:
        try:
            await self._core.wait_until_ready()
        except ClosedError:
            if not (self.closing or self.closed):
                raise
            return  # closed before the store answered: never ready
        except Exception as exc:  # as Node: the failure is an `error`
            self.emit("error", exc)
            return
        self.emit("ready")

    def _forward_error(self, error: BaseException) -> None:
        """`error`; a lock the worker could not renew is `lockRenewalFailed` too (with
        the job ids, as `bullmq`'s lock manager emits it)."""
        self.emit("error", error)
        if isinstance(error, LockError) and error.operation == RENEW_LOCK:
            self.emit("lockRenewalFailed", [error.job_id])

    async def _process(self, core: CoreJob, token: str) -> Any:
        assert self.processor is not None
        if isinstance(self.processor, Sandbox):  # its children read psyq's job fields
            return await self.processor(core)
        job = self._wrap(core)
        job.token = token
        self.refuse_started_too_often(job)
        args: tuple[Any, ...] = (job, token)
        if self._arity >= 3:
            controller = self._controllers[job.id or ""] = AbortController()
            args = (job, token, controller.signal)
        elif self._arity < 2:
            args = (job,)
        try:
            result = self.processor(*args)
            return await result if inspect.isawaitable(result) else result
        finally:
            self._controllers.pop(job.id or "", None)

    # ------------------------------------------------------------------ running
    async def run(self) -> None:
        if self.running:
            raise Exception("Worker is already running")
        await self._core.run()

    async def getNextJob(self, token: str, opts: Mapping[str, Any] | None = None) -> Job | None:
        """Take the next job, locked with `token` (manual processing); None when none
        came within `drainDelay` seconds."""
        core = await self._core.get_next_job(token, block=(opts or {}).get("block", True))
        if core is None:
            return None
        job = Job.wrap(self, core)
        self.emit("active", job, "waiting")
        return job

    async def moveToActive(self, token: str) -> Job | None:
        """Take the next ready job, locked with `token`, without waiting; None when none."""
        core = await self._core.get_next_job(token, block=False)
        return None if core is None else Job.wrap(self, core)

    # ------------------------------------------------------------------ control
    async def extendLocks(self) -> list[str]:
        return await self._core.extend_locks()

    async def runStalledJobsCheck(self) -> None:
        try:
            await self._core.check_stalled()
        except Exception as exc:
            self.emit("error", exc)

    async def rateLimit(self, expire_time_ms: int) -> None:
        """Hold the whole queue for `expire_time_ms`; then raise RateLimitError."""
        await self._core.rate_limit(expire_time_ms)

    async def pause(self, doNotWaitActive: bool = False) -> None:
        """Take no more jobs (this worker only); wait for the active ones unless
        `doNotWaitActive`. Emits `paused`."""
        await self._core.pause(doNotWaitActive)

    def resume(self) -> None:
        """Take jobs again. Emits `resumed`."""
        self._core.resume()

    def cancelJob(self, job_id: str, reason: str | None = None) -> bool:
        """Abort the signal of active job `job_id`; False when its processor takes none."""
        controller = self._controllers.get(str(job_id))
        if controller is None:
            return False
        controller.abort(reason)
        return True

    def cancelAllJobs(self, reason: str | None = None) -> None:
        for controller in list(self._controllers.values()):
            controller.abort(reason)

    def cancelProcessing(self) -> None:
        """Abort every active job's signal (as a forced close does first)."""
        self.cancelAllJobs("worker force-closed")

    async def close(self, force: bool = False) -> None:
        """Stop taking jobs and wait for the active ones (with force: hand them back now).
        Emits `closing("closing queue")` first and `closed` once all is released, as Node;
        a second call waits for the first."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close(force))
        await self._close_task

    async def _close(self, force: bool) -> None:
        self.emit("closing", "closing queue")
        self.closing = True
        if force:
            self.forceClosing = True
            self.cancelAllJobs("worker force-closed")
        task = self._run_task
        if task is not None and not task.done() and not self._core.running:
            task.cancel()  # autorun had not started yet
        await self._core.close(force, hand_back=False)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        if self._ready_task is not None:  # a store that never answered: never ready
            self._ready_task.cancel()
            await asyncio.gather(self._ready_task, return_exceptions=True)
        for release in (self.backend.close, self._close_own_sandbox):
            try:
                await release()
            except Exception as exc:
                self.emit("error", exc)
        self.closed = True
        self.emit("closed")

    disconnect = close

    async def _close_own_sandbox(self) -> None:
        """Stop the child processes of a processor file (once the jobs are done)."""
        if self._own_sandbox is not None:
            await self._own_sandbox.close()
