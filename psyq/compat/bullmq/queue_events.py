"""`QueueEvents(name, opts)`: a queue's event feed with the `bullmq` package's names.

Listeners get `(args, event_id)`; `args` carries BullMQ's field names (`jobId`,
`returnvalue` decoded from JSON, ...). Each job event is also emitted as
`<event>:<jobId>`; `drained` gets `(event_id)` alone. Options: `connection`, `prefix`,
`lastEventId` (default "$": only new events), `blockingTimeout` (ms), `autorun`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from psyq.compat.bullmq import queue as queue_module
from psyq.compat.bullmq._core import CoreQueueEvents
from psyq.compat.bullmq.backend import redis_client, redis_keys, store_of
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["QueueEvents"]


class QueueEvents(CoreQueueEvents):
    """Listens to the events of queue `name`."""

    def __init__(self, name: str, opts: Mapping[str, Any] | None = None) -> None:
        self.opts: dict[str, Any] = {
            "blockingTimeout": 10_000,
            "lastEventId": "$",
            "autorun": True,
            **dict(opts or {}),
        }
        prefix = str(self.opts.get("prefix") or DEFAULT_PREFIX)
        self.url = _store(name, self.opts)
        super().__init__(
            name,
            self.url,
            prefix=prefix,
            last_event_id=str(self.opts["lastEventId"] or "$"),
            blocking_timeout=int(self.opts["blockingTimeout"]),
            autorun=bool(self.opts["autorun"]),
        )
        self.qualifiedName = f"{prefix}:{name}"
        self.keys = redis_keys(prefix, name)
        self._running_now = False

    @property
    def client(self) -> Any:
        """The redis-py client once reading on Redis, else None."""
        return redis_client(self._backend, self.url)

    redisConnection = client

    @property
    def running(self) -> bool:
        return self._running_now

    @property
    def closing(self) -> bool:
        return self._closed

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def _consumer_task(self) -> asyncio.Task[None] | None:
        return self._task

    async def run(self) -> None:
        if self._running_now:
            raise Exception("QueueEvents is already running.")
        if self._task is None:
            self._task = asyncio.current_task()
        self._running_now = True
        try:
            await super().run()
        finally:
            self._running_now = False

    async def waitUntilReady(self) -> None:
        await self.wait_until_ready()

    def _dispatch(self, event: str, args: dict[str, Any], event_id: str) -> None:
        if event == "drained":
            self.emit("drained", event_id)
            return
        super()._dispatch(event, args, event_id)
        job_id = args.get("jobId")
        if job_id:
            self.emit(f"{event}:{job_id}", args, event_id)

    async def close(self) -> None:
        """Stop listening; a second call does nothing."""
        if self._task is asyncio.current_task():
            self._task = None
        await super().close()

    # ------------------------------------------------------------------ Node BullMQ's own
    # (calls of Node BullMQ 6 that the Python package lacks: psyq.compat.bullmq.node_surface)
    @property
    def backend(self) -> Any:
        """The store's adapter once reading (None before)."""
        return self._backend

    def getBackend(self) -> Any:
        return self.backend

    def toKey(self, type: str) -> str:
        return f"{self.qualifiedName}:{type}"

    async def disconnect(self) -> None:
        await self.close()


def _store(name: str, opts: Mapping[str, Any]) -> str:
    """The store of queue `name`'s events: the one a Queue of the same options opens
    (through the same factory, `bullmq.queue.create_backend`, looked up at call time)."""
    return store_of(queue_module.create_backend(name, opts), opts)
