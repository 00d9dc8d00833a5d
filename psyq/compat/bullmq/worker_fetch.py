"""The calls of the Worker's fetch loop as the `bullmq` packages name them (taking a job
from stored job data, waiting for one, the block timeout, retrying after a connection error
and telling one apart), and `getCompleted`, mixed into the layer's Worker (worker.py)."""

from __future__ import annotations

import asyncio
import errno
import functools
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from psyq.backends.optional import SchedulesNextRun
from psyq.compat.bullmq.job import Job
from psyq.core.events import EventEmitter
from psyq.errors import ConnectionError as PsyqConnectionError

__all__ = ["SHORT_RETRY_DELAY", "WorkerFetchCalls", "getCompleted"]

# How long the fetch loop rests after an error that is not about the connection.
SHORT_RETRY_DELAY = 0.1

_TRANSIENT_ERRNOS = {
    getattr(errno, name)
    for name in ("ECONNREFUSED", "ECONNRESET", "ENETUNREACH", "EHOSTUNREACH", "EPIPE")
    if hasattr(errno, name)
}
_ERRNO_IN_TEXT = re.compile(r"\[Errno (\d+)\]")
_TRANSIENT_TEXT = (
    "ECONNREFUSED",
    "ECONNRESET",
    "ENETUNREACH",
    "EHOSTUNREACH",
    "EPIPE",
    "Connection refused",
    "Connection reset",
    "Network is unreachable",
    "No route to host",
    "Broken pipe",
)


@functools.lru_cache(maxsize=1)
def _postgres_connection_error_types() -> tuple[type[BaseException], ...]:
    try:
        from psycopg import InterfaceError, OperationalError  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return ()
    return (InterfaceError, OperationalError)


@functools.lru_cache(maxsize=1)
def _redis_connection_error_types() -> tuple[type[BaseException], ...]:
    try:
        from redis import exceptions
    except ImportError:  # pragma: no cover - redis is a psyq dependency
        return ()
    return (exceptions.ConnectionError, exceptions.TimeoutError, exceptions.BusyLoadingError)


class WorkerFetchCalls(EventEmitter):
    """The fetch loop's calls, mixed into the layer's Worker (which gives `name`, `opts`,
    `backend`, the fetch state and the properties below that raise NotImplementedError
    here)."""

    name: str
    opts: dict[str, Any]
    backend: Any
    closing: bool
    closed: bool
    blockUntil: int
    limitUntil: int
    drained: bool

    @property
    def paused(self) -> bool:
        raise NotImplementedError  # the Worker's

    @property
    def minimumBlockTimeout(self) -> float:
        raise NotImplementedError  # the Worker's

    @property
    def maximumBlockTimeout(self) -> float:
        raise NotImplementedError  # the Worker's

    async def nextJobFromJobData(
        self,
        job_data: Any = None,
        job_id: str | None = None,
        limit_until: int = 0,
        delay_until: int = 0,
        token: str | None = None,
    ) -> Job | None:
        """A Job from stored job data (as the fetch loop makes them)."""
        self.limitUntil = max(limit_until or 0, 0)
        if delay_until:
            self.blockUntil = max(int(delay_until), 0)
        if not job_data:
            self.drained = True
            return None
        self.drained = False
        job = Job.fromJSON(self, job_data, job_id)
        job.token = token
        if job.repeatJobKey:
            await self._schedule_next_run(job.repeatJobKey, str(job.id))
        return job

    async def _schedule_next_run(self, scheduler_id: str, job_id: str) -> None:
        """Add the next run of the scheduler whose run `job_id` this worker was handed, as
        the store does when it hands one out itself (a no-op when it did already; a store
        that advances schedulers only at fetch leaves it to the fetch)."""
        try:
            adapter = await self.backend.adapter()
            if isinstance(adapter, SchedulesNextRun):
                await adapter.schedule_next_run(self.name, scheduler_id, job_id)
        except Exception as exc:
            self.emit("error", RuntimeError(f"Failed to add repeatable job: {exc}"))

    async def waitForJob(self) -> int:
        """Wait (up to the block timeout) for a job to be ready. Connection errors are
        re-raised after a short rest, so a caller that retries does not spin."""
        try:
            await self.backend.waitForJob(self.getBlockTimeout(self.blockUntil))
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            if self.isConnectionError(exc) and not (self.closing or self.closed):
                await asyncio.sleep(SHORT_RETRY_DELAY)
            raise
        return 0

    def getBlockTimeout(self, block_until: int) -> float:
        if not block_until:
            return max(float(self.opts.get("drainDelay", 5)), self.minimumBlockTimeout)
        delay = (block_until - time.time() * 1000) / 1000
        return min(max(delay, self.minimumBlockTimeout), self.maximumBlockTimeout)

    async def retryIfFailed(
        self, fn: Callable[[], Awaitable[Any]], opts: Mapping[str, Any] | None = None
    ) -> Any:
        """Call `fn`; after a connection error wait `delay_in_ms` and call again (at most
        `max_retries` times). Another error is emitted and raised, or with
        `only_emit_error` emitted and None returned after a short rest."""
        opts = opts or {}
        delay_ms = opts.get("delay_in_ms", 15_000)
        max_retries = opts.get("max_retries", float("inf"))
        retries = 0
        while retries < max_retries:
            try:
                return await fn()
            except Exception as exc:
                if not self.isConnectionError(exc):
                    if not (self.paused or self.closing):
                        self.emit("error", exc)
                    if not opts.get("only_emit_error"):
                        raise
                    if not (self.closing or self.closed):
                        await asyncio.sleep(SHORT_RETRY_DELAY)
                    return None
                retries += 1
                if retries >= max_retries:
                    raise
                if delay_ms and not (self.closing or self.closed):
                    await asyncio.sleep(delay_ms / 1000)
        return None

    def isConnectionError(self, error: BaseException) -> bool:
        """True for the errors of a store that cannot be reached (worth retrying)."""
        transient = (
            PsyqConnectionError,
            ConnectionRefusedError,
            ConnectionResetError,
            TimeoutError,
            *_redis_connection_error_types(),
        )
        if isinstance(error, transient):
            return True
        if self.opts.get("backend") == "postgres" and isinstance(
            error, _postgres_connection_error_types()
        ):
            return True
        if isinstance(error, OSError):
            if error.errno in _TRANSIENT_ERRNOS:
                return True
            text = str(error)
            if any(int(n) in _TRANSIENT_ERRNOS for n in _ERRNO_IN_TEXT.findall(text)):
                return True
            return any(fragment in text for fragment in _TRANSIENT_TEXT)
        return False


async def getCompleted(tasks: set[Any], emit: Callable[..., Any]) -> tuple[list[Any], set[Any]]:
    """The results of the tasks of `tasks` that finished first (errors go to `emit`), and
    the ones still pending."""
    if not tasks:
        await asyncio.sleep(0)
        return [], set()
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    results = []
    for task in done:
        try:
            result = task.result()
        except Exception as exc:
            emit("error", exc)
            continue
        if result is not None:
            results.append(result)
    return results, pending
