"""Node BullMQ 6's Worker calls that the `bullmq` package for Python lacks (the table of
them all: psyq.compat.bullmq.node_surface)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from psyq.compat.bullmq.abort_controller import AbortController
from psyq.core.events import EventEmitter

__all__ = ["NodeWorkerCalls"]


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

    def toKey(self, type: str) -> str:
        return f"{self.qualifiedName}:{type}"

    async def runStalledJobsCheck(self) -> None:
        raise NotImplementedError  # the Worker's

    def getBackend(self) -> Any:
        return self.backend

    async def delay(
        self, milliseconds: int | None = None, abortController: AbortController | None = None
    ) -> None:
        """Sleep `milliseconds` (default 5000), or until `abortController` aborts."""
        seconds = (5000 if milliseconds is None else milliseconds) / 1000
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
        """Check for stalled jobs now and then every `stalledInterval` ms until the worker
        closes (a worker without a processor checks only when asked; one that runs checks
        by itself). Does nothing with `skipStalledCheck`."""
        if self.opts.get("skipStalledCheck") or self.closing or self.closed:
            return
        await self.runStalledJobsCheck()
        task = asyncio.ensure_future(self._stalled_checks())
        self.once("closed", lambda *args: task.cancel())

    async def _stalled_checks(self) -> None:
        while not (self.closing or self.closed):
            await asyncio.sleep(int(self.opts["stalledInterval"]) / 1000)
            await self.runStalledJobsCheck()
