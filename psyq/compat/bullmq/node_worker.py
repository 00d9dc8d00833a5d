"""Node BullMQ 6's Worker calls that the `bullmq` package for Python lacks (the table of
them all: psyq.compat.bullmq.node_surface)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from psyq.compat.bullmq.abort_controller import AbortController
from psyq.core.events import EventEmitter
from psyq.errors import UnrecoverableError

__all__ = ["NodeWorkerCalls", "check_max_started_attempts"]

STARTED_TOO_OFTEN = "job started more than allowable limit"  # Node's failed reason


def check_max_started_attempts(opts: Mapping[str, Any]) -> None:
    """Node's `maxStartedAttempts`: absent, or a whole number ≥ 0 (0: no limit)."""
    limit = opts.get("maxStartedAttempts")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"maxStartedAttempts must be greater or equal than 0, got {limit!r}")


class NodeWorkerCalls(EventEmitter):
    """Calls of Node BullMQ 6's Worker that the Python package lacks, mixed into the
    layer's Worker (which gives `name`, `opts`, `backend`, `closing`, ...)."""

    name: str
    opts: dict[str, Any]
    closing: bool
    closed: bool
    backend: Any

    @property
    def qualifiedName(self) -> str:
        return str(self.backend.qualifiedName)

    def refuse_started_too_often(self, job: Any) -> None:
        """Fail a job started more than `maxStartedAttempts` times without running it, as
        Node's worker does (UnrecoverableError: no retry)."""
        limit = self.opts.get("maxStartedAttempts")
        if limit and limit < job.attemptsStarted:
            raise UnrecoverableError(STARTED_TOO_OFTEN)

    def toKey(self, type: str) -> str:
        return f"{self.qualifiedName}:{type}"

    async def runStalledJobsCheck(self) -> None:
        raise NotImplementedError  # the Worker's

    def getBackend(self) -> Any:
        return self.backend

    async def delay(
        self, milliseconds: int | None = None, abortController: AbortController | None = None
    ) -> None:
        """Sleep `milliseconds` (default 100, as Node), or until `abortController` aborts."""
        seconds = (milliseconds or 100) / 1000
        if abortController is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(abortController.signal.wait(), seconds)

    async def extendJobLocks(
        self, jobIds: list[str], tokens: list[str], duration: int
    ) -> list[str]:
        """Extend the locks of jobs `jobIds` (each held with its token) by `duration` ms;
        returns the ids whose lock was lost."""
        if len(jobIds) != len(tokens):
            raise ValueError(f"{len(jobIds)} job ids but {len(tokens)} tokens")
        adapter = await self.backend.adapter()
        locks = dict(zip((str(i) for i in jobIds), tokens, strict=True))
        lost: list[str] = await adapter.extend_locks(self.name, locks, int(duration))
        return lost

    async def startStalledCheckTimer(self) -> None:
        """Start checking for stalled jobs, now and then every `stalledInterval` ms, until
        the worker closes or pauses, as Node's does (a worker without a processor checks
        only when told to; one that runs checks by itself). A second call while the
        checks run, or one with `skipStalledCheck`, does nothing."""
        if self.opts.get("skipStalledCheck") or self.closing or self.closed:
            return
        running = self.__dict__.get("_stalled_checker")
        if running is not None and not running.done():
            return
        task = self.__dict__["_stalled_checker"] = asyncio.ensure_future(self._stalled_checks())
        self.once("closed", lambda *args: task.cancel())

    async def _stalled_checks(self) -> None:
        while not (self.closing or self.closed or self.isPaused()):
            await self.runStalledJobsCheck()  # emits `error` for a check that failed
            await asyncio.sleep(int(self.opts["stalledInterval"]) / 1000)

    def isPaused(self) -> bool:
        raise NotImplementedError  # the Worker's
