"""Completions that wait a moment for the worker's next take to carry them.

At a steady trickle of jobs (each job's completion before the next job is added) every job
costs three commits: its add, its take, and its completion, which fetch-next cannot pair
with a take because nothing is waiting yet. Every one of them is a notifying commit, and
Postgres runs notifying commits one at a time through their WAL flush, so the third one
delays the next job's take (docs/architecture.md, "Completions that wait for the next
take"). When the queue's last take found no other job waiting and no job was announced
since (the backend's idle mark), a completion would be such a commit of its own: it waits
here, up to LINGER_MS, and the next take of the queue (fast.settle_take completes and
takes in one statement) carries it; at LINGER_MS the completions that waited go in one
statement without a take. A job is then two commits, and a completion becomes visible at
most LINGER_MS later, and only while the queue is otherwise idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from psyq.backends.base import Settlement
from psyq.errors import PsyqError

__all__ = ["LINGER_MS", "Linger", "Lingering"]

LINGER_MS = 10

Errors = list[PsyqError | None]


class Lingering:
    """One settle_many call's completions, and the future its caller waits on (its
    errors, one per settlement)."""

    __slots__ = ("future", "settlements")

    def __init__(self, settlements: Sequence[Settlement]) -> None:
        self.settlements = list(settlements)
        self.future: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()

    def resolve(self, errors: Errors) -> None:
        if not self.future.done():
            self.future.set_result(errors)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


def settlements_of(groups: Sequence[Lingering]) -> list[Settlement]:
    return [item for group in groups for item in group.settlements]


class Linger:
    """Per queue, the completions waiting for a take; `flush(queue)` settles what is
    still waiting after LINGER_MS (it takes the groups with `pop`)."""

    def __init__(self, flush: Callable[[str], Awaitable[None]]) -> None:
        self._flush = flush
        self._waiting: dict[str, list[Lingering]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._flushing: set[asyncio.Task[None]] = set()

    def add(self, queue: str, settlements: Sequence[Settlement]) -> Lingering:
        group = Lingering(settlements)
        waiting = self._waiting.setdefault(queue, [])
        waiting.append(group)
        if len(waiting) == 1:
            loop = asyncio.get_running_loop()
            self._timers[queue] = loop.call_later(LINGER_MS / 1000, self._due, queue)
        return group

    def pop(self, queue: str) -> list[Lingering]:
        """The queue's waiting groups, now the caller's to settle."""
        timer = self._timers.pop(queue, None)
        if timer is not None:
            timer.cancel()
        return self._waiting.pop(queue, [])

    def _due(self, queue: str) -> None:
        self._timers.pop(queue, None)
        task = asyncio.ensure_future(self._flush(queue))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def close(self) -> None:
        """Settle everything still waiting (the backend is closing)."""
        for queue in list(self._waiting):
            timer = self._timers.pop(queue, None)
            if timer is not None:
                timer.cancel()
            await self._flush(queue)
        if self._flushing:
            await asyncio.gather(*self._flushing, return_exceptions=True)
