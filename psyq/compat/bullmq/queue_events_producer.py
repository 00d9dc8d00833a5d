"""`QueueEventsProducer(name, opts)`: publish custom events to a queue's event feed
(`publishEvent({"eventName": ..., **fields})`), read by QueueEvents listeners of
`eventName`. The feed is the store's events (Redis's events stream, Postgres's event
table); the other stores have none to publish to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psyq.backends.optional import PublishesEvents
from psyq.compat.bullmq import queue as queue_module
from psyq.errors import UnsupportedError
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["QueueEventsProducer"]


class QueueEventsProducer:
    def __init__(self, name: str, opts: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.opts = dict(opts or {})
        self.prefix = self.opts.get("prefix", DEFAULT_PREFIX)
        # the store a Queue of the same options opens (through its factory)
        self.backend = queue_module.create_backend(name, self.opts)
        self.keys = self.backend.keys
        self.closing = False

    @property
    def client(self) -> Any:
        """The redis-py client once the producer's store is open on Redis, else None."""
        return self.backend.conn

    redisConnection = client

    @property
    def qualifiedName(self) -> str:
        return str(self.backend.qualifiedName)

    async def publishEvent(self, args: Mapping[str, Any], maxEvents: int = 1000) -> None:
        if "eventName" not in args:
            raise ValueError("publishEvent needs an 'eventName'")
        fields = {k: v for k, v in args.items() if k != "eventName"}
        adapter = await self.backend.adapter()
        if not isinstance(adapter, PublishesEvents):
            raise UnsupportedError(self.backend.url.split(":", 1)[0], "custom events")
        await adapter.publish_event(self.name, str(args["eventName"]), fields, maxEvents)

    async def close(self) -> None:
        if not self.closing:
            self.closing = True
            await self.backend.close()
