"""`Worker`: takes jobs from a queue and runs a processor on them.

Shape of the loop (each step a small method):
- a fetcher fills idle slots: `move_to_active` for as many jobs as slots are idle, else it
  waits on the backend's wake-up (`wait_for_job`), never polling;
- each slot runs a job through the middleware onion (`_run`), settles it, and when the
  queue has more work takes the next job in the same backend call (fetch-next); when it
  had none, a completion may wait to ride on the next take while the slot is free (a
  backend's settle_linger_ms);
- one timer renews every held lock, one timer moves stalled jobs back, one stops the jobs
  `queue.cancel_job` marked.

The Worker holds its options, its slots (the active jobs and the tasks running their
processors) and its lifecycle (run, pause, close), and owns three parts, each with its own
state and a narrow view of the Worker (a Protocol of the part's module):
- `Fetching` (psyq.core.fetching, sees a `FetchContext`): the fetcher loop, tokens, lost
  takes, the drained and short marks;
- `Settling` (psyq.core.settling, sees a `SettleContext`): settles with retries, the loop
  turn's batch, deferred completions;
- `Locks` (psyq.core.locks, sees a `LockContext`): lock renewal, lost locks, cancelled
  and stalled jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from psyq.backends.base import BackendAdapter, Completed, Limiter
from psyq.core.backoff import BackoffStrategy
from psyq.core.events import EventEmitter
from psyq.core.fetching import Fetching, Take
from psyq.core.job import Job, QueueRef, failure_outcome
from psyq.core.locks import RENEW_LOCK, Locks
from psyq.core.options import check_keep, check_limiter
from psyq.core.processor import Processor, is_async, wants_token
from psyq.core.queue import _BackendUser
from psyq.core.settle import Outcome, log
from psyq.core.settling import Settling
from psyq.errors import ConnectionError as Unreachable
from psyq.errors import (
    DelayedError,
    InvalidOptionsError,
    JobCancelledError,
    PsyqError,
    RateLimitError,
    UnsupportedError,
    WaitingChildrenError,
)
from psyq.plugins import PluginHost
from psyq.rules import codec
from psyq.rules.limits import check_int
from psyq.rules.prefix import DEFAULT_PREFIX
from psyq.rules.reconnect import until_done

__all__ = ["RENEW_LOCK", "Processor", "Worker"]

# A slot that chains jobs through fetch-next yields to the event loop this often.
YIELD_EVERY = 32
# Return values that come back from JSON unchanged (others are read back from the JSON).
_JSON_EXACT = frozenset({type(None), bool, int, float, str})
# How often a worker asks whether one of its active jobs was cancelled.
CANCEL_CHECK_MS = 500


class Worker(_BackendUser, EventEmitter):
    """Processes jobs of one queue.

    Events: active(job, prev) completed(job, result) failed(job, error) progress(job, progress)
    stalled(job_id, prev) drained() error(error) closed().
    """

    def __init__(
        self,
        name: str,
        processor: Processor | None = None,
        connection: str | BackendAdapter | None = None,
        *,
        concurrency: int = 1,
        limiter: Mapping[str, Any] | Limiter | None = None,
        lock_duration: int = 30_000,
        lock_renew_time: int | None = None,
        stalled_interval: int = 30_000,
        max_stalled_count: int = 1,
        drain_delay: float = 5.0,
        autorun: bool = True,
        prefix: str = DEFAULT_PREFIX,
        plugins: Sequence[object] = (),
        backoff_strategies: Mapping[str, BackoffStrategy] | None = None,
        worker_name: str | None = None,
        skip_stalled_check: bool = False,
        skip_lock_renewal: bool = False,
        remove_on_complete: bool | int | Mapping[str, Any] | None = None,
        remove_on_fail: bool | int | Mapping[str, Any] | None = None,
    ) -> None:
        _BackendUser.__init__(self, name, connection, prefix)
        EventEmitter.__init__(self)
        if processor is not None and not callable(processor):
            raise InvalidOptionsError(f"processor must be callable, got {processor!r}")
        self.processor = processor
        self._concurrency = check_int("concurrency", concurrency, minimum=1)
        self.limiter = check_limiter(limiter)
        # BullMQ's worker options: retention for jobs without their own removeOn* option
        self.remove_on_complete = check_keep("remove_on_complete", remove_on_complete)
        self.remove_on_fail = check_keep("remove_on_fail", remove_on_fail)
        self.lock_duration = check_int("lock_duration", lock_duration, minimum=1)
        self.lock_renew_time = check_int(
            "lock_renew_time", lock_renew_time or max(1, lock_duration // 2), minimum=1
        )
        self.stalled_interval = check_int("stalled_interval", stalled_interval, minimum=1)
        self.max_stalled_count = check_int("max_stalled_count", max_stalled_count)
        if not isinstance(drain_delay, int | float) or drain_delay <= 0:
            raise InvalidOptionsError(f"drain_delay must be > 0 seconds, got {drain_delay!r}")
        self.drain_delay = float(drain_delay)
        self.id = worker_name or f"{name}:{uuid.uuid4().hex[:12]}"
        self.skip_stalled_check = skip_stalled_check
        self.skip_lock_renewal = skip_lock_renewal
        self._strategies = dict(backoff_strategies or {})
        self._plugins = PluginHost(plugins)
        hooked = self._plugins.has_hook  # the hooks of every job, looked up once
        self._process_hooks = (hooked("psyq_before_process"), hooked("psyq_after_process"))
        self._init_slots()
        self._init_lifecycle()
        self._fetching = Fetching(self)
        self._settler = Settling(self, self._fetching)
        self._locks = Locks(self, self._active, self._in_processor)
        if processor is not None:
            self._is_async = is_async(processor)
            self._wants_token = wants_token(processor)
        if autorun and processor is not None:
            self._start_soon()

    def _init_slots(self) -> None:
        """The slots' state: the active jobs, the tasks running their processors, the idle
        slots and the jobs handed to them."""
        self._active: dict[str, Job] = {}
        self._slots: list[asyncio.Task[Any]] = []  # one task per slot, made as the worker runs
        self._in_processor: dict[str, asyncio.Task[Any] | None] = {}
        self._idle = 0
        self._slot_freed = asyncio.Event()
        self._handoff: asyncio.Queue[Job] = asyncio.Queue()
        self._run = self._plugins.wrap_processor(self._call_processor)

    def _init_lifecycle(self) -> None:
        """The state of run, pause and close."""
        self._closing: asyncio.Event | None = None
        self._running: asyncio.Task[None] | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._stopped: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ref: QueueRef | None = None
        self._forced = False
        self._hand_back_on_close = True
        self._resumed = asyncio.Event()  # cleared while the worker is paused
        self._resumed.set()

    def _start_soon(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise InvalidOptionsError(
                "Worker(autorun=True) needs a running event loop; create it inside async code "
                "or pass autorun=False and await worker.run()"
            ) from None
        self._running = asyncio.ensure_future(self.run())
        self._running.add_done_callback(self._autorun_ended)

    def _autorun_ended(self, task: asyncio.Task[None]) -> None:
        """A run started by autorun that raised (a bad URL, a store that refused): nobody
        awaits it, so its error is the `error` event's, or logged when nobody listens."""
        error = None if task.cancelled() else task.exception()
        if error is not None and not self.emit("error", error):
            log.error("worker %s stopped: %r", self.id, error)

    async def __aenter__(self) -> Worker:
        await self._queue_ref()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ public API
    @property
    def running(self) -> bool:
        return self._closing is not None and not self._closing.is_set()

    @property
    def concurrency(self) -> int:
        """How many jobs the worker runs at once. Set while it runs, it takes effect at
        once: more slots start, or slots beyond it take no job until enough are done."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self._concurrency = check_int("concurrency", value, minimum=1)
        if self.running and self._ref is not None and self._slots:
            self._add_slots(self._ref)
        self._slot_freed.set()  # the fetcher counts again

    def is_running(self) -> bool:
        return self.running

    async def run(self) -> None:
        """Process jobs until `close()`."""
        if self.processor is None:
            raise InvalidOptionsError("this Worker has no processor; use get_next_job()")
        if self._closing is not None:
            raise InvalidOptionsError(f"worker {self.id!r} is already running")
        self._closing = asyncio.Event()
        self._stopped = asyncio.Event()
        self._run_task = asyncio.current_task()
        try:
            ref = await self._reachable_ref()
            if ref is None:  # closed before the store answered
                return
            await self._notify("psyq_worker_start", worker=self)
            try:
                await self._supervise(ref)
            finally:
                await self._notify("psyq_worker_stop", worker=self)
                await self._register(ref, False)
        finally:
            self._stopped.set()

    async def _register(self, ref: QueueRef, starting: bool) -> None:
        """Tell the backend's worker registry (queue.get_workers) we start or stop. The
        start is retried while the store does not answer until it lands (each failure an
        `error`): a worker that started in an outage is listed once it is over."""
        try:
            if starting:
                info = {"concurrency": self.concurrency, "pid": os.getpid()}
                call = partial(ref.backend.register_worker, self.name, self.id, info)
                await until_done(call, (Unreachable,), lambda exc: self.emit("error", exc))
            else:
                await ref.backend.unregister_worker(self.name, self.id)
        except UnsupportedError:
            return
        except PsyqError as exc:
            self.emit("error", exc)

    async def close(self, force: bool = False, hand_back: bool = True) -> None:
        """Stop taking jobs; wait for active ones (or, with force, hand them back now;
        with hand_back=False too, leave them active for the stall check to recover, as
        BullMQ's forced close does)."""
        self._hand_back_on_close = hand_back
        if self._closing is None and self._running is not None:  # autorun not started yet
            self._running.cancel()
            await asyncio.gather(self._running, return_exceptions=True)
        if self._closing is not None:
            self._forced = self._forced or force
            self._closing.set()
            self._slot_freed.set()
            if self._stopped is not None and self._run_task is not asyncio.current_task():
                await self._stopped.wait()  # run() returns once slots are done or handed back
        if self._closed:
            return
        self._closed = True
        await self._wait_listeners()
        await self._release()
        self.emit("closed")

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    async def pause(self, do_not_wait_active: bool = False) -> None:
        """Take no more jobs (this worker only; `queue.pause()` pauses every worker); wait
        for the active ones to finish unless `do_not_wait_active`. Emits `paused`."""
        if not self.paused:
            self._resumed.clear()
            self._settler.flush()
            await self._fetching.wait_idle()  # a fetch already sent may still bring a job
            while (self._active or not self._handoff.empty()) and not do_not_wait_active:
                await self._slot_freed.wait()
                self._slot_freed.clear()
        self.emit("paused")

    def resume(self) -> None:
        """Take jobs again after `pause()`. Emits `resumed`."""
        if self.paused:
            self._resumed.set()
            self.emit("resumed")

    async def get_next_job(self, token: str, block: bool = True) -> Job | None:
        """Take one job locked with `token` (manual processing); None when none came."""
        ref = await self._queue_ref()
        fetching = self._fetching
        jobs = await fetching.fetch(ref, fetching.request_for([token]))
        if not jobs and block:
            await ref.backend.wait_for_job(self.name, int(self.drain_delay * 1000))
            jobs = await fetching.fetch(ref, fetching.request_for([token]))
        return jobs[0] if jobs else None

    async def rate_limit(self, expire_time_ms: int) -> None:
        """Hold the whole queue for `expire_time_ms`; raise RateLimitError afterwards."""
        ref = await self._queue_ref()
        await ref.backend.rate_limit(self.name, check_int("expire_time_ms", expire_time_ms))

    async def extend_locks(self) -> list[str]:
        """Renew the locks of every active job now; returns the ids whose lock was lost."""
        return await self._locks.extend()

    def statistics(self) -> dict[str, int]:
        """Counts of what happened that is no failure, so raised no `error` event:
        `renewals_after_settle`, lock renewals that crossed their job's own settle (the
        store had finished the job); `settle_retries`, settles sent again after the store
        could not be reached (one that gives up is an `error`)."""
        return {
            "renewals_after_settle": self._locks.renewals_after_settle,
            "settle_retries": self._settler.retries,
        }

    async def check_stalled(self) -> list[str]:
        """Move jobs whose lock expired back to waiting (or fail them); returns the ids."""
        return await self._locks.check_stalled()

    async def check_cancelled(self) -> list[str]:
        """Stop the active jobs that `queue.cancel_job` marked; returns their ids."""
        return await self._locks.check_cancelled()

    # ------------------------------------------------------------------ supervision
    async def _queue_ref(self) -> QueueRef:
        if self._ref is None:
            self._ref = QueueRef(self.name, await self._open(), self._strategies, self)
        return self._ref

    async def _reachable_ref(self) -> QueueRef | None:
        """The queue, its store opened: asked again while the store does not answer (each
        failure an `error`), as a BullMQ worker waits for Redis; None if closed first."""
        assert self._closing is not None
        report = partial(self.emit, "error")
        opening = asyncio.ensure_future(until_done(self._queue_ref, (Unreachable,), report))
        closing = asyncio.ensure_future(self._closing.wait())
        await asyncio.wait((opening, closing), return_when=asyncio.FIRST_COMPLETED)
        closing.cancel()
        if not opening.done():
            opening.cancel()
        await asyncio.gather(opening, closing, return_exceptions=True)
        return None if opening.cancelled() else opening.result()

    async def _supervise(self, ref: QueueRef) -> None:
        """Run the slots, the fetcher and the timers until close; registering runs beside
        the first take, which so waits for no connection of the registry's."""
        assert self._closing is not None
        self._add_slots(ref)
        fetcher = self._spawn(self._fetching.run(ref))
        registering = self._spawn(self._register(ref, True))
        timers = self._timers(ref)
        await self._closing.wait()
        self._settler.flush()
        if not self._forced:  # a take under way ends: its jobs run, the completions on it settle
            await self._fetching.wait_idle()
        for task in (fetcher, *timers):
            task.cancel()
        await asyncio.gather(fetcher, *timers, return_exceptions=True)
        await _ended(registering)  # still retrying: the store did not answer all along
        abandoned = await self._stop_slots(self._slots)
        for job in abandoned if self._hand_back_on_close else ():
            await self._hand_back(ref, job)
        while not self._handoff.empty():
            await self._hand_back(ref, self._handoff.get_nowait())

    def _add_slots(self, ref: QueueRef) -> None:
        """Start slots until there are `concurrency` (a lower value leaves the extra ones
        idle: `_available` does not count them)."""
        while len(self._slots) < self._concurrency:
            self._slots.append(self._spawn(self._slot(ref)))

    def _timers(self, ref: QueueRef) -> list[asyncio.Task[None]]:
        timers = []
        if not self.skip_lock_renewal:
            timers.append(self._spawn(self._every(self.lock_renew_time, self.extend_locks)))
        if not self.skip_stalled_check:
            timers.append(self._spawn(self._every(self.stalled_interval, self.check_stalled, True)))
        timers.append(self._spawn(self._every(CANCEL_CHECK_MS, self._cancel_timer)))
        return timers

    async def _cancel_timer(self) -> None:
        try:
            await self.check_cancelled()
        except UnsupportedError:
            raise asyncio.CancelledError from None  # the backend cannot cancel: stop checking

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _every(
        self, interval_ms: int, action: Callable[[], Awaitable[Any]], now: bool = False
    ) -> None:
        if not now:
            await asyncio.sleep(interval_ms / 1000)
        while True:
            try:
                await action()
            except Exception as exc:
                self.emit("error", exc)
            await asyncio.sleep(interval_ms / 1000)

    async def _stop_slots(self, slots: list[asyncio.Task[Any]]) -> list[Job]:
        """Graceful: busy slots finish their job. Forced: stop now and return their jobs."""
        while self._active and not self._forced:
            await self._slot_freed.wait()
            self._slot_freed.clear()
        # a deferred completion's job has run: its settle (flushed at close) is awaited
        deferred = self._settler.deferred
        abandoned = [job for job in self._active.values() if not deferred(job.id)]
        for task in slots:
            task.cancel()
        await asyncio.gather(*slots, return_exceptions=True)
        await self._settler.wait_deferred()
        return abandoned

    async def _hand_back(self, ref: QueueRef, job: Job) -> None:
        try:
            await ref.backend.move_job_from_active_to_wait(self.name, job.id, job.token or "")
        except PsyqError as exc:
            self.emit("error", exc)

    # ------------------------------------------------------------------ the parts' view
    async def _wait_for_slots(self) -> int:
        """The number of idle slots within `concurrency`, once there is one and the worker
        is not paused."""
        while True:
            while self._available() <= 0:
                await self._slot_freed.wait()
                self._slot_freed.clear()
            await self._resumed.wait()
            available = self._available()  # concurrency may have been lowered meanwhile
            if available > 0:
                return available

    def _available(self) -> int:
        """Idle slots that may take a job: none while `concurrency` or more are busy (it
        was lowered while they ran)."""
        return min(self._idle, self._concurrency - self._busy())

    def _busy(self) -> int:
        return len(self._slots) - self._idle

    def _hand_out(self, jobs: list[Job]) -> None:
        """Give the fetched jobs to idle slots."""
        self._idle -= len(jobs)
        for job in jobs:
            self._handoff.put_nowait(job)

    def _riding_take(self) -> Take | None:
        """The take that deferred completions ride on, while there are some."""
        return self._settler.riding_take()

    def _fetching_next(self) -> bool:
        """Whether a completion may take the slot's next job (not closing, not paused, not
        more jobs running than `concurrency`)."""
        return (
            self._closing is not None
            and not self._closing.is_set()
            and not self.paused
            and self._busy() <= self._concurrency
        )

    def _slot_done(self, job: Job) -> None:
        """The job is no longer active: its slot is free."""
        self._active.pop(job.id, None)
        self._slot_freed.set()

    # ------------------------------------------------------------------ one slot
    async def _slot(self, ref: QueueRef) -> None:
        while True:
            self._idle += 1
            self._slot_freed.set()
            job: Job | None = await self._handoff.get()
            chained = 0
            while job is not None:
                job = await self._process(ref, job)
                chained += 1
                if chained % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # an in-process backend never suspends: let others run

    async def _process(self, ref: QueueRef, job: Job) -> Job | None:
        """Run one job and settle it; returns the next job when fetch-next found one."""
        self._active[job.id] = job
        if self._listeners.get("active"):  # emit's own first test, without its call
            self.emit("active", job, "waiting")
        job._keep = self.remove_on_complete
        deferred = False
        following: Job | None = None
        try:
            ran = await self._outcome(job)
            if ran is None:
                return None
            outcome, error = ran
            settler = self._settler
            if job._completed_in is not None and error is None:
                following = await settler.after_complete_in(ref, job, job._completed_in)
            elif isinstance(outcome, Completed) and settler.defers(ref, outcome):
                deferred = True
                settler.settle_later(ref, job, outcome)
            else:
                following = await settler.settle(ref, job, outcome, error)
            return following
        finally:
            if not deferred:
                self._active.pop(job.id, None)
                if following is None:  # the slot goes idle; with a next job it stays busy,
                    self._slot_freed.set()  # and waking the fetcher or a pause is for nothing

    async def _outcome(self, job: Job) -> tuple[Outcome, BaseException | None] | None:
        """Run the job through the middleware onion; None when the processor moved it."""
        hooked = self._process_hooks  # found once: a worker's plugins are fixed
        if hooked[0]:
            await self._notify("psyq_before_process", job=job)
        result: Any = None
        error: BaseException | None = None
        try:
            result = await self._run_guarded(job)
            text = codec.dumps(result, "return value", job.id)
            outcome: Outcome = Completed(text, self.remove_on_complete)
            if type(result) in _JSON_EXACT:  # what JSON gives back is the value itself
                job._returnvalue = result
        except (DelayedError, WaitingChildrenError):
            await self._notify("psyq_after_process", job=job, result=None, error=None)
            return None
        except RateLimitError:
            await self._hand_back(await self._queue_ref(), job)
            return None
        except Exception as exc:
            error = exc
            outcome = failure_outcome(job, exc, self._strategies, self.remove_on_fail)
        if hooked[1]:
            await self._notify("psyq_after_process", job=job, result=result, error=error)
        return outcome, error

    async def _run_guarded(self, job: Job) -> Any:
        """Run the onion under the job's `timeout`, and fail it if it was cancelled."""
        timeout = job.option("timeout")
        task = asyncio.current_task()
        self._in_processor[job.id] = task
        try:
            if timeout is None:
                result = await self._run(job)
            else:
                result = await asyncio.wait_for(self._run(job), timeout / 1000)
        except TimeoutError:
            raise TimeoutError(f"job {job.id} timed out after {timeout} ms") from None
        except asyncio.CancelledError:
            if job._cancelled is None or self._forced or task is None:
                raise
            task.uncancel()
            raise JobCancelledError(job.id, job._cancelled) from None
        finally:
            self._in_processor.pop(job.id, None)
        if job._cancelled is not None:  # a thread that finished after being cancelled
            raise JobCancelledError(job.id, job._cancelled)
        return result

    async def _call_processor(self, job: Job) -> Any:
        assert self.processor is not None
        args = (job, job.token) if self._wants_token else (job,)
        if self._is_async:
            return await self.processor(*args)
        result = await asyncio.to_thread(self.processor, *args)
        return await result if inspect.isawaitable(result) else result

    # ------------------------------------------------------------------ plugins
    async def _notify(self, hook: str, **kwargs: Any) -> None:
        if not self._plugins.has_hook(hook):
            return
        for error in await self._plugins.notify(hook, **kwargs):
            self.emit("error", error)


async def _ended(task: asyncio.Task[None]) -> None:
    """`task` awaited, cancelled first if still running (a fault of the code surfaces)."""
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
