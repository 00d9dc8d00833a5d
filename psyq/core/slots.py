"""`Slots`: the one owner of a Worker's slots, shared by its parts.

A slot is a task that runs one job at a time. The slots' state is here and nowhere else:
the active jobs (a slot's job from its take until it is settled, a deferred completion's
until its settle lands), the jobs whose processor runs (and the task to cancel for each),
how many slots are idle, the queue that hands fetched jobs to idle slots, and the gate
that says whether jobs may come in (open, paused, closing, forced).

The Worker starts and stops the slot tasks; `Fetching` waits for idle slots and hands
them jobs, `Settling` frees a slot when its job is settled, `Locks` renews and watches the
active jobs. Nothing here names a queue: a job carries its own, so one `Slots` could serve
the takes of several queues under one concurrency (docs/design/0011).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from psyq.core.job import Job

__all__ = ["Slots"]


class Slots:
    """A worker's slots: active jobs, jobs in their processor, idle slots, the hand-off."""

    def __init__(self, concurrency: int) -> None:
        self.active: dict[str, Job] = {}  # job id -> the job a slot holds
        # job id -> the task running its processor, None when cancelling it would not stop
        # the processor (one running in a thread)
        self.in_processor: dict[str, asyncio.Task[Any] | None] = {}
        self.tasks: list[asyncio.Task[Any]] = []  # one per slot, made as the worker runs
        self.taking = False  # jobs may come in: the worker runs and is not closing
        self.forced = False  # closing by force: jobs are handed back, settles not retried
        self._concurrency = concurrency
        self._idle = 0
        self._freed = asyncio.Event()  # a slot went idle, or the gate changed
        self._handoff: asyncio.Queue[Job] = asyncio.Queue()
        self._resumed = asyncio.Event()  # cleared while paused
        self._resumed.set()

    # ------------------------------------------------------------------ the gate
    @property
    def concurrency(self) -> int:
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        """A new limit takes effect at once: the fetcher counts idle slots again."""
        self._concurrency = value
        self._freed.set()

    def open(self) -> None:
        self.taking = True

    def close(self, force: bool) -> None:
        """Take no more jobs (force: hand the active ones back); wakes whoever waits."""
        self.taking = False
        self.forced = self.forced or force
        self._freed.set()

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    def taking_next(self) -> bool:
        """Whether a completion may take its slot's next job: taking, not paused, and not
        more jobs running than `concurrency` (it was lowered while they ran)."""
        return self.taking and self._resumed.is_set() and self.busy() <= self._concurrency

    # ------------------------------------------------------------------ counting
    def missing(self) -> int:
        """How many slot tasks to start to reach `concurrency` (a lower value leaves the
        extra ones idle: `available` does not count them)."""
        return self._concurrency - len(self.tasks)

    def busy(self) -> int:
        return len(self.tasks) - self._idle

    def available(self) -> int:
        """Idle slots that may take a job: none while `concurrency` or more are busy."""
        return min(self._idle, self._concurrency - self.busy())

    # ------------------------------------------------------------------ the hand-off
    async def wait_for_idle(self) -> int:
        """The number of idle slots within `concurrency`, once there is one and the slots
        are not paused."""
        while True:
            while self.available() <= 0:
                await self._freed.wait()
                self._freed.clear()
            await self._resumed.wait()
            available = self.available()  # concurrency may have been lowered meanwhile
            if available > 0:
                return available

    def hand_out(self, jobs: list[Job]) -> None:
        """Give fetched jobs to idle slots (as many as `wait_for_idle` said)."""
        self._idle -= len(jobs)
        for job in jobs:
            self._handoff.put_nowait(job)

    async def next_job(self) -> Job:
        """A slot goes idle and waits for a job handed out to it."""
        self._idle += 1
        self._freed.set()
        return await self._handoff.get()

    def handed_unclaimed(self) -> list[Job]:
        """The jobs handed out that no slot took (the slots stopped): to hand back."""
        jobs = []
        while not self._handoff.empty():
            jobs.append(self._handoff.get_nowait())
        return jobs

    # ------------------------------------------------------------------ a job's life
    def begin(self, job: Job) -> None:
        """A slot holds the job: it is active (its lock renewed, close waits for it)."""
        self.active[job.id] = job

    def done(self, job: Job, chained: bool = False) -> None:
        """The job is no longer active. `chained`: its slot already holds its next job,
        so it stays busy and waking the fetcher or a pause would be for nothing."""
        self.active.pop(job.id, None)
        if not chained:
            self._freed.set()

    async def wait_paused(self) -> None:
        """Until no job is active nor handed out and waiting for a slot (a pause waits
        for its running jobs)."""
        while self.active or not self._handoff.empty():
            await self._freed.wait()
            self._freed.clear()

    async def wait_closed(self) -> None:
        """Until no job is active, or the close is forced (a graceful close waits for its
        running jobs; a forced one, even one forced while it waited, does not)."""
        while self.active and not self.forced:
            await self._freed.wait()
            self._freed.clear()

    def abandoned(self, settling: Callable[[str], bool]) -> list[Job]:
        """The active jobs a forced stop leaves, less those `settling` still settles."""
        return [job for job in self.active.values() if not settling(job.id)]

    def processing(self, job: Job, task: asyncio.Task[Any] | None) -> None:
        """The job's processor runs in `task` (None: cancelling would not stop it)."""
        self.in_processor[job.id] = task

    def processed(self, job: Job) -> None:
        self.in_processor.pop(job.id, None)
