"""The events stream (QueueEvents): rows of the layout's `event` table, woken by
`NOTIFY bullmq_events`."""

from __future__ import annotations

import json
from typing import Any

from psyq.backends.postgres.bullmq.connection import BullmqConnection
from psyq.backends.postgres.bullmq.listen import EVENTS_CHANNEL

__all__ = ["Events"]


class Events(BullmqConnection):
    """Reads the stream."""

    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        after = int(await self.newest_event_id(queue)) if last_id == "$" else int(last_id)
        future = self.listener.register(EVENTS_CHANNEL, queue)
        try:
            rows = await self._rows("events.read", queue, after, count)
            if not rows and block_ms > 0:
                await self.listener.wait(future, block_ms)
                rows = await self._rows("events.read", queue, after, count)
        finally:
            self.listener.discard(EVENTS_CHANNEL, queue, future)
        return [(str(row["id"]), row["event"], _fields(row["data"])) for row in rows]

    async def newest_event_id(self, queue: str) -> str:
        return str(await self._value("events.newest", queue))

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        await self._rows("events.max_len", queue, max_len)


def _fields(data: str) -> dict[str, Any]:
    """An event's data: BullMQ's stream fields, every value a string."""
    fields: dict[str, Any] = json.loads(data)
    return {
        key: value if isinstance(value, str) else json.dumps(value) for key, value in fields.items()
    }
