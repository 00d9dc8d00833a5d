"""`Fetching`: the part of a Worker that takes jobs for its idle slots.

Its fetcher loop waits for idle slots (`Slots.wait_for_idle`), takes as many jobs with
`move_to_active` and hands them to the slots, else waits on the backend's wake-up
(`wait_for_job`), never polling. It owns the loop, the tokens of its takes whose reply was
lost (`LostTakes`) and its pace while the store fails. The requests and the `drained` /
`short` marks are the `Takes` it shares with the settling part; deferred completions ride
on its take through `Riders` (the settling part, given at construction: the two parts
never call each other through the Worker).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Protocol

from psyq.backends.base import FetchRequest
from psyq.core.job import Job, QueueRef
from psyq.core.parts import Configured, Reports
from psyq.core.slots import Slots
from psyq.core.takes import LostTakes, Take, Takes
from psyq.rules.reconnect import Reconnect

__all__ = ["Fetching", "Riders"]


class Riders(Protocol):
    """Completions that may ride on the fetcher's take (the settling part)."""

    def riding_take(self) -> Take | None:
        """The take that deferred completions ride on, while there are some."""


class Fetching:
    """Takes jobs for a Worker's slots: its fetcher loop, and each take's lost tokens."""

    def __init__(
        self, config: Configured, slots: Slots, takes: Takes, riders: Riders, reports: Reports
    ) -> None:
        self._config = config
        self._slots = slots
        self._takes = takes
        self._riders = riders
        self._reports = reports
        self._lost = LostTakes()  # the tokens of the fetcher's takes whose reply was lost
        self._backoff = Reconnect()  # the fetcher's pace while the backend fails
        self._not_fetching = asyncio.Event()  # cleared while the fetcher's call is out
        self._not_fetching.set()

    async def wait_idle(self) -> None:
        """Until no take of the fetcher is out (a take sent may still bring jobs)."""
        await self._not_fetching.wait()

    async def fetch(self, ref: QueueRef, request: FetchRequest, own: bool = False) -> list[Job]:
        """Take a job per token; `own`: the fetcher's take, with the worker's fresh tokens
        (LostTakes), on which deferred completions ride unless the last take was short
        (this one would find nothing: Postgres answers it from its idle mark)."""
        if not own:
            records = await ref.backend.move_to_active(ref.name, request)
        else:
            riding = None if self._takes.short else self._riders.riding_take()
            take = riding or partial(ref.backend.move_to_active, ref.name)
            records = await self._lost.take(take, request)
        return [Job(ref, record) for record in records]

    async def run(self, ref: QueueRef) -> None:
        """Fill idle slots; when nothing is ready, wait for the backend to say so."""
        slots, takes = self._slots, self._takes
        woken = False  # the last take found nothing and the fetcher has waited since
        while True:
            idle = await slots.wait_for_idle()
            if not slots.taking:
                return
            self._not_fetching.clear()
            request = takes.request(idle)
            try:
                jobs = await self.fetch(ref, request, own=True)
            except Exception as exc:
                self._not_fetching.set()
                await self._trouble(exc)
                continue
            self._not_fetching.set()
            self._backoff.succeeded()
            takes.took(len(request.tokens), len(jobs), woken)
            woken = not jobs
            if jobs:
                slots.hand_out(jobs)
            else:
                await self._wait_for_work(ref)

    async def _wait_for_work(self, ref: QueueRef) -> None:
        if self._takes.ran_dry():
            self._reports.emit("drained")
        delay = self._config.options.drain_delay
        try:
            await ref.backend.wait_for_job(ref.name, int(delay * 1000))
        except Exception as exc:
            await self._trouble(exc)
        self._takes.waited()

    async def _trouble(self, exc: Exception) -> None:
        """Report the error; wait (jittered backoff, 50 ms doubling to 2 s) and try again."""
        self._reports.emit("error", exc)
        self._backoff.failed()
        await self._backoff.wait()
