"""`QueueEventsProducer(name, opts)`: publish custom events to a queue's event feed
(`publishEvent({"eventName": ..., **fields})`), read by QueueEvents listeners of
`eventName`. The feed is Redis's events stream: this needs a Redis store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psyq.compat.bullmq.backend import create_backend
from psyq.errors import UnsupportedError

__all__ = ["QueueEventsProducer"]


class QueueEventsProducer:
    def __init__(self, name: str, opts: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.opts = dict(opts or {})
        self.prefix = self.opts.get("prefix", "bull")
        self.backend = create_backend(name, self.opts)
        self.keys = self.backend.keys
        self.closing = False

    @property
    def qualifiedName(self) -> str:
        return str(self.backend.qualifiedName)

    async def publishEvent(self, args: Mapping[str, Any], maxEvents: int = 1000) -> None:
        if "eventName" not in args:
            raise ValueError("publishEvent needs an 'eventName'")
        client = await self.backend.open()
        if client is None:
            raise UnsupportedError(self.backend.url.split(":", 1)[0], "custom events")
        fields = {"event": args["eventName"]}
        fields.update({k: v for k, v in args.items() if k != "eventName"})
        await client.xadd(self.keys["events"], fields, maxlen=maxEvents, approximate=True)

    async def close(self) -> None:
        if not self.closing:
            self.closing = True
            await self.backend.close()
