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

The Worker holds its options (one checked `WorkerOptions`), its lifecycle (run, pause,
close, the timers) and the per-job path (`_process`), and wires its parts, each given
explicitly what it shares (docs/design/0011):
- `Slots` (psyq.core.slots): the active jobs, the jobs in their processor, the idle
  slots and the hand-off, the gate (open, paused, closing, forced);
- `Takes` (psyq.core.takes): fresh tokens, the drained and short marks;
- `Fetching` (psyq.core.fetching): the fetcher loop;
- `Settling` (psyq.core.settling): settles with retries, the loop turn's batch, deferred
  completions (the fetcher's `Riders`);
- `Locks` (psyq.core.locks): lock renewal, lost locks, cancelled and stalled jobs.
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

from psyq.backends.base import BackendAdapter, Completed, GroupLimits, Limiter
from psyq.core.backoff import BackoffStrategy
from psyq.core.events import EventEmitter
from psyq.core.fetching import Fetching
from psyq.core.job import Job, QueueRef, failure_outcome
from psyq.core.locks import RENEW_LOCK, Locks
from psyq.core.parts import Hooks, log
from psyq.core.processor import Processor, is_async, wants_token
from psyq.core.queue import _BackendUser
from psyq.core.settling import Outcome, Settling
from psyq.core.slots import Slots
from psyq.core.takes import Takes
from psyq.core.worker_options import Keep, OptionAttribute, WorkerOptions
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

__all__ = ["RENEW_LOCK", "Processor", "Worker", "WorkerOptions"]

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

    # the options, read from (and, set, checked into) `self.options`
    limiter = OptionAttribute[Limiter | None]()
    lock_duration = OptionAttribute[int]()
    lock_renew_time = OptionAttribute[int]()
    stalled_interval = OptionAttribute[int]()
    max_stalled_count = OptionAttribute[int]()
    drain_delay = OptionAttribute[float]()
    skip_stalled_check = OptionAttribute[bool]()
    skip_lock_renewal = OptionAttribute[bool]()
    remove_on_complete = OptionAttribute[Keep]()
    remove_on_fail = OptionAttribute[Keep]()
    group = OptionAttribute[GroupLimits | None]()

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
        group: Mapping[str, Any] | GroupLimits | None = None,
    ) -> None:
        _BackendUser.__init__(self, name, connection, prefix)
        EventEmitter.__init__(self)
        self._use(processor)
        self.options = WorkerOptions.create(
            concurrency=concurrency,
            limiter=limiter,
            lock_duration=lock_duration,
            lock_renew_time=lock_renew_time,
            stalled_interval=stalled_interval,
            max_stalled_count=max_stalled_count,
            drain_delay=drain_delay,
            autorun=autorun,
            worker_name=worker_name,
            skip_stalled_check=skip_stalled_check,
            skip_lock_renewal=skip_lock_renewal,
            remove_on_complete=remove_on_complete,
            remove_on_fail=remove_on_fail,
            group=group,
        )
        self.id = worker_name or f"{name}:{uuid.uuid4().hex[:12]}"
        self._strategies = dict(backoff_strategies or {})
        self._wire(PluginHost(plugins))
        self._init_lifecycle()
        if autorun and processor is not None:
            self._start_soon()

    def _use(self, processor: Processor | None) -> None:
        """The processor, and how it is called (found once)."""
        if processor is not None and not callable(processor):
            raise InvalidOptionsError(f"processor must be callable, got {processor!r}")
        self.processor = processor
        if processor is not None:
            self._is_async = is_async(processor)
            self._wants_token = wants_token(processor)

    def _wire(self, plugins: PluginHost) -> None:
        """The parts, each given what it shares: the slots, the takes, the hooks."""
        self._plugins = plugins
        hooked = plugins.has_hook  # the hooks of every job, looked up once
        self._process_hooks = (hooked("psyq_before_process"), hooked("psyq_after_process"))
        self._run = plugins.wrap_processor(self._call_processor)
        self._hooks = Hooks(self.emit, plugins)
        self._slots = Slots(self.options.concurrency)
        self._takes = Takes(self, self.id)
        self._settler = Settling(self, self._slots, self._takes, self._hooks)
        self._fetching = Fetching(self, self._slots, self._takes, self._settler, self._hooks)
        self._locks = Locks(self, self._slots, self._hooks)

    def _init_lifecycle(self) -> None:
        """The state of run, pause and close."""
        self._closing: asyncio.Event | None = None
        self._running: asyncio.Task[None] | None = None
        self._run_task: asyncio.Task[Any] | None = None
        self._stopped: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ref: QueueRef | None = None
        self._hand_back_on_close = True

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
        return self.options.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        self.options = self.options.changed(concurrency=value)
        self._slots.concurrency = self.options.concurrency  # the fetcher counts again
        if self.running and self._ref is not None and self._slots.tasks:
            self._add_slots(self._ref)

    def is_running(self) -> bool:
        return self.running

    async def run(self) -> None:
        """Process jobs until `close()`."""
        if self.processor is None:
            raise InvalidOptionsError("this Worker has no processor; use get_next_job()")
        if self._closing is not None:
            raise InvalidOptionsError(f"worker {self.id!r} is already running")
        self._closing = asyncio.Event()
        self._slots.open()
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
            self._slots.close(force)
            self._closing.set()
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
        return self._slots.paused

    async def pause(self, do_not_wait_active: bool = False) -> None:
        """Take no more jobs (this worker only; `queue.pause()` pauses every worker); wait
        for the active ones to finish unless `do_not_wait_active`. Emits `paused`."""
        if not self.paused:
            self._slots.pause()
            self._settler.flush()
            await self._fetching.wait_idle()  # a fetch already sent may still bring a job
            if not do_not_wait_active:
                await self._slots.wait_paused()
        self.emit("paused")

    def resume(self) -> None:
        """Take jobs again after `pause()`. Emits `resumed`."""
        if self.paused:
            self._slots.resume()
            self.emit("resumed")

    async def get_next_job(self, token: str, block: bool = True) -> Job | None:
        """Take one job locked with `token` (manual processing); None when none came."""
        ref = await self._queue_ref()
        fetching, takes = self._fetching, self._takes
        jobs = await fetching.fetch(ref, takes.request_for([token]))
        if not jobs and block:
            await ref.backend.wait_for_job(self.name, int(self.drain_delay * 1000))
            jobs = await fetching.fetch(ref, takes.request_for([token]))
        return jobs[0] if jobs else None

    async def rate_limit(self, expire_time_ms: int) -> None:
        """Hold the whole queue for `expire_time_ms`; raise RateLimitError afterwards."""
        ref = await self._queue_ref()
        await ref.backend.rate_limit(self.name, check_int("expire_time_ms", expire_time_ms))

    async def rate_limit_group(self, job: Job, expire_time_ms: int) -> None:
        """Hold the group of `job` for `expire_time_ms` (BullMQ Pro's rateLimitGroup); the
        processor then raises RateLimitError so the job goes back to its group."""
        group = job.opts.get("group")
        if group is None:
            raise InvalidOptionsError(f"job {job.id!r} has no group to rate-limit")
        ref = await self._queue_ref()
        delay = check_int("expire_time_ms", expire_time_ms)
        await ref.backend.rate_limit_group(self.name, group["id"], delay)

    async def extend_locks(self) -> list[str]:
        """Renew the locks of every active job now; returns the ids whose lock was lost."""
        if not self._slots.active:  # nothing held: no store call, nor an open for one
            return []
        return await self._locks.extend(await self._queue_ref())

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
        return await self._locks.check_stalled(await self._queue_ref())

    async def check_cancelled(self) -> list[str]:
        """Stop the active jobs that `queue.cancel_job` marked; returns their ids."""
        if not self._slots.active:
            return []
        return await self._locks.check_cancelled(await self._queue_ref())

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
        if not self._slots.forced:  # a take under way ends: its jobs run, the completions
            await self._fetching.wait_idle()  # on it settle
        for task in (fetcher, *timers):
            task.cancel()
        await asyncio.gather(fetcher, *timers, return_exceptions=True)
        await _ended(registering)  # still retrying: the store did not answer all along
        abandoned = await self._stop_slots()
        for job in abandoned if self._hand_back_on_close else ():
            await self._hand_back(ref, job)
        for job in self._slots.handed_unclaimed():
            await self._hand_back(ref, job)

    def _add_slots(self, ref: QueueRef) -> None:
        """Start slot tasks until there are `concurrency`."""
        for _ in range(self._slots.missing()):
            self._slots.tasks.append(self._spawn(self._slot(ref)))

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

    async def _stop_slots(self) -> list[Job]:
        """Graceful: busy slots finish their job. Forced: stop now and return their jobs."""
        slots = self._slots
        await slots.wait_closed()
        # a deferred completion's job has run: its settle (flushed at close) is awaited
        abandoned = slots.abandoned(self._settler.deferred)
        for task in slots.tasks:
            task.cancel()
        await asyncio.gather(*slots.tasks, return_exceptions=True)
        await self._settler.wait_deferred()
        return abandoned

    async def _hand_back(self, ref: QueueRef, job: Job) -> None:
        try:
            await ref.backend.move_job_from_active_to_wait(self.name, job.id, job.token or "")
        except PsyqError as exc:
            self.emit("error", exc)

    # ------------------------------------------------------------------ one slot
    async def _slot(self, ref: QueueRef) -> None:
        slots = self._slots
        while True:
            job: Job | None = await slots.next_job()
            chained = 0
            while job is not None:
                job = await self._process(ref, job)
                chained += 1
                if chained % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # an in-process backend never suspends: let others run

    async def _process(self, ref: QueueRef, job: Job) -> Job | None:
        """Run one job and settle it; returns the next job when fetch-next found one."""
        self._slots.begin(job)
        if self._listeners.get("active"):  # emit's own first test, without its call
            self.emit("active", job, "waiting")
        job._keep = self.options.remove_on_complete
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
                self._slots.done(job, chained=following is not None)

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
            outcome: Outcome = Completed(text, self.options.remove_on_complete)
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
            keep = self.options.remove_on_fail
            outcome = failure_outcome(job, exc, self._strategies, keep)
        if hooked[1]:
            await self._notify("psyq_after_process", job=job, result=result, error=error)
        return outcome, error

    async def _run_guarded(self, job: Job) -> Any:
        """Run the onion under the job's `timeout`, and fail it if it was cancelled."""
        timeout = job.option("timeout")
        task = asyncio.current_task()
        slots = self._slots
        # a processor in a thread is not stopped by cancelling its task: nothing to cancel
        slots.processing(job, task if self._is_async else None)
        try:
            if timeout is None:
                result = await self._run(job)
            else:
                result = await asyncio.wait_for(self._run(job), timeout / 1000)
        except TimeoutError:
            raise TimeoutError(f"job {job.id} timed out after {timeout} ms") from None
        except asyncio.CancelledError:
            if job._cancelled is None or slots.forced or task is None:
                raise
            task.uncancel()
            raise JobCancelledError(job.id, job._cancelled) from None
        finally:
            slots.processed(job)
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
        await self._hooks.notify(hook, **kwargs)

    @property
    def _active(self) -> dict[str, Job]:
        """The active jobs (the slots'), by id: for the compat layer and tests' reports."""
        return self._slots.active


async def _ended(task: asyncio.Task[None]) -> None:
    """`task` awaited, cancelled first if still running (a fault of the code surfaces)."""
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
