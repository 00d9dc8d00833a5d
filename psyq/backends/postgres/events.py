"""The events stream (QueueEvents): rows of the layout's `event` table, woken by
`NOTIFY bullmq_events`."""

from __future__ import annotations

import json
from typing import Any

from psyq.backends.postgres.connection import BullmqConnection
from psyq.backends.postgres.listen import EVENTS_CHANNEL, JOBS_CHANNEL

__all__ = ["Events"]

CHANNELS = (EVENTS_CHANNEL, JOBS_CHANNEL)
# Fields BullMQ's readers take as numbers; every other field is a string, as in Redis.
_NUMERIC_FIELDS = ("attemptsMade", "delay")


class Events(BullmqConnection):
    """Reads the stream."""

    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        after = int(await self.newest_event_id(queue)) if last_id == "$" else int(last_id)
        # A job becoming ready wakes readers too: the layout's bulk add writes its events
        # with a NOTIFY on bullmq_jobs only.
        woken = [self.listener.register(channel, queue) for channel in CHANNELS]
        try:
            rows = await self._rows("events.read", queue, after, count)
            if not rows and block_ms > 0:
                await self.listener.wait_any(woken, block_ms)
                rows = await self._rows("events.read", queue, after, count)
        finally:
            for channel, future in zip(CHANNELS, woken, strict=True):
                self.listener.discard(channel, queue, future)
        return [(str(row["id"]), row["event"], _fields(row["data"])) for row in rows]

    async def newest_event_id(self, queue: str) -> str:
        return str(await self._value("events.newest", queue))

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        await self._rows("events.max_len", queue, str(max_len))


def _fields(data: str) -> dict[str, Any]:
    """An event's data as BullMQ's stream fields: strings, but attemptsMade and delay."""
    fields: dict[str, Any] = json.loads(data)
    for key, value in fields.items():
        if key in _NUMERIC_FIELDS:
            fields[key] = int(float(value))
        elif not isinstance(value, str):
            fields[key] = json.dumps(value)
    return fields
