"""Live updates: one `QueueEvents` reader per queue that an open page watches, fanned out
to the event streams of every tab watching it, and closed with the last of them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psyq
from psyq.dashboard.store import Store

__all__ = ["EventHub", "Inbox"]

INBOX = 1_000  # events kept for a slow tab; beyond, they are dropped (it re-reads anyway)
READY_TIMEOUT = 10.0

# (event, args) as QueueEvents gives them; None: the dashboard is shutting down.
Inbox = asyncio.Queue[tuple[str, dict[str, Any]] | None]


@dataclass
class _Watch:
    events: psyq.QueueEvents
    inboxes: set[Inbox] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class EventHub:
    """One QueueEvents per queue that an open page watches, fanned out to its streams; a
    queue's reader closes with its last stream."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._watches: dict[str, _Watch] = {}

    @contextlib.asynccontextmanager
    async def subscribe(self, name: str) -> AsyncIterator[Inbox]:
        """An inbox of (event, args) of queue `name`, from the moment this yields; None in
        it means the dashboard is shutting down."""
        await self._store.queue(name)  # NotFound for a queue the store does not hold
        watch = self._watches.get(name)
        if watch is None:
            events = psyq.QueueEvents(
                name, connection=self._store.connection, prefix=self._store.prefix
            )
            watch = self._watches[name] = _Watch(events)
            watch.task = asyncio.ensure_future(self._pump(watch))
        inbox: Inbox = asyncio.Queue(INBOX)
        watch.inboxes.add(inbox)
        try:
            await watch.events.wait_until_ready(READY_TIMEOUT)
            yield inbox
        finally:
            watch.inboxes.discard(inbox)
            if not watch.inboxes and self._watches.get(name) is watch:
                del self._watches[name]
                await _stop(watch)

    async def _pump(self, watch: _Watch) -> None:
        async for event, args, _ in watch.events:
            for inbox in list(watch.inboxes):
                if not inbox.full():
                    inbox.put_nowait((event, args))

    async def close(self) -> None:
        """Ends every stream (at shutdown, so no open tab holds the server up)."""
        watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            for inbox in watch.inboxes:
                while inbox.full():
                    inbox.get_nowait()  # the end must get in
                inbox.put_nowait(None)
            await _stop(watch)


async def _stop(watch: _Watch) -> None:
    if watch.task is not None:
        watch.task.cancel()
        await asyncio.gather(watch.task, return_exceptions=True)
    await watch.events.close()
