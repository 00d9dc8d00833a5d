"""`Fetching`: the part of a Worker that takes jobs for its idle slots.

It owns what a take needs: the worker's fresh lock tokens, the tokens of takes whose reply
was lost (LostTakes), the pace while the store fails, whether the queue looks drained, and
whether the last take came back short (the queue likely has no other job waiting: a
completion may then wait for a call to ride on). The fetcher loop fills idle slots with
`move_to_active`, else waits on the backend's wake-up (`wait_for_job`), never polling.

It sees its Worker through `FetchContext`: the options of a take, whether it runs, its
idle slots, and the `error`/`drained` events.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

from psyq.backends.base import FetchRequest, JobRecord, Limiter
from psyq.core.job import Job, QueueRef
from psyq.core.parts import PartContext
from psyq.core.settle import LostTakes
from psyq.rules.reconnect import Reconnect

__all__ = ["FetchContext", "Fetching", "Take"]

Take = Callable[[FetchRequest], Awaitable[list[JobRecord]]]  # a store call that takes jobs


class FetchContext(PartContext, Protocol):
    """What the fetching part sees of its Worker."""

    @property
    def id(self) -> str: ...

    @property
    def limiter(self) -> Limiter | None: ...

    @property
    def drain_delay(self) -> float: ...

    @property
    def running(self) -> bool: ...

    async def _wait_for_slots(self) -> int:
        """The number of idle slots, once there is one and the worker is not paused."""

    def _hand_out(self, jobs: list[Job]) -> None:
        """Give the fetched jobs to idle slots."""

    def _riding_take(self) -> Take | None:
        """The take that deferred completions ride on, while there are some."""


class Fetching:
    """Takes jobs for a Worker: its fetcher loop, and each take's request and tokens."""

    def __init__(self, worker: FetchContext) -> None:
        self._worker = worker
        self._tokens = itertools.count(1)
        self._lost = LostTakes()  # the tokens of the fetcher's takes whose reply was lost
        self._backoff = Reconnect()  # the fetcher's pace while the backend fails
        self._not_fetching = asyncio.Event()  # cleared while the fetcher's call is out
        self._not_fetching.set()
        self.drained = True
        self.short = False  # the queue likely has no other job waiting (see run)

    def request(self, n: int) -> FetchRequest:
        """A request for `n` jobs with the worker's fresh tokens (a completion's fetch-next
        asks for one: this is on every job's path)."""
        worker, tokens = self._worker, self._tokens
        prefix = worker.id
        if n == 1:  # no comprehension (a call) for the one of a fetch-next
            fresh = [f"{prefix}:{next(tokens)}"]
        else:
            fresh = [f"{prefix}:{next(tokens)}" for _ in range(n)]
        return FetchRequest(fresh, worker.lock_duration, prefix, worker.limiter)

    def request_for(self, tokens: list[str]) -> FetchRequest:
        """A request for a job per token of a caller's (get_next_job's)."""
        worker = self._worker
        return FetchRequest(tokens, worker.lock_duration, worker.id, worker.limiter)

    def took_next(self, found: bool) -> None:
        """A completion's fetch-next came back: short (`found` none) means the queue likely
        has no other job waiting."""
        self.short = not found

    def found_work(self) -> None:
        """A completion brought the slot its next job: the queue is not drained."""
        self.drained = False

    async def wait_idle(self) -> None:
        """Until no take of the fetcher is out (a take sent may still bring jobs)."""
        await self._not_fetching.wait()

    async def fetch(self, ref: QueueRef, request: FetchRequest, own: bool = False) -> list[Job]:
        """Take a job per token; `own`: the fetcher's take, with the worker's fresh tokens
        (LostTakes), on which deferred completions ride unless the last take was short
        (this one would find nothing: Postgres answers it from its idle mark)."""
        name = self._worker.name
        if not own:
            records = await ref.backend.move_to_active(name, request)
        else:
            riding = None if self.short else self._worker._riding_take()
            take = riding or partial(ref.backend.move_to_active, name)
            records = await self._lost.take(take, request)
        return [Job(ref, record) for record in records]

    async def run(self, ref: QueueRef) -> None:
        """Fill idle slots; when nothing is ready, wait for the backend to say so."""
        worker = self._worker
        woken = False  # the last take found nothing and the fetcher has waited since
        while True:
            idle = await worker._wait_for_slots()
            if not worker.running:
                return
            self._not_fetching.clear()
            request = self.request(idle)
            try:
                jobs = await self.fetch(ref, request, own=True)
            except Exception as exc:
                self._not_fetching.set()
                await self._trouble(exc)
                continue
            self._not_fetching.set()
            self._backoff.succeeded()
            # the queue likely has no other job waiting: the take came back short, or it
            # is the first after the queue ran dry (a job's arrival woke the fetcher)
            self.short = len(jobs) < len(request.tokens) or woken
            woken = not jobs
            if jobs:
                self.drained = False
                worker._hand_out(jobs)
            else:
                await self._wait_for_work(ref)

    async def _wait_for_work(self, ref: QueueRef) -> None:
        worker = self._worker
        if not self.drained:
            self.drained = True
            worker.emit("drained")
        try:
            await ref.backend.wait_for_job(worker.name, int(worker.drain_delay * 1000))
        except Exception as exc:
            await self._trouble(exc)
        self.short = False

    async def _trouble(self, exc: Exception) -> None:
        """Report the error; wait (jittered backoff, 50 ms doubling to 2 s) and try again."""
        self._worker.emit("error", exc)
        self._backoff.failed()
        await self._backoff.wait()
