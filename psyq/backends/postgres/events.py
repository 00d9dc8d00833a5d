"""The events stream (QueueEvents): rows of the layout's `event` table, woken by
`NOTIFY bullmq_events`. While it reads a queue's events, the backend holds a session named
`<queue>:qe`, so Node BullMQ's getQueueEvents lists the reader (presence.py), and a lease
under which the queue's `when-read` policy writes its events (readers.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from psyq.backends.postgres.listen import EVENTS_CHANNEL, JOBS_CHANNEL
from psyq.backends.postgres.presence import queue_events_session_name
from psyq.backends.postgres.readers import EventReaders
from psyq.errors import PsyqError

__all__ = ["Events"]

log = logging.getLogger("psyq.postgres")
CHANNELS = (EVENTS_CHANNEL, JOBS_CHANNEL)
# How long a read waits for the event writers in flight to end before it hands out what it
# has (a bulk add of many jobs holds its events until it commits).
SETTLE_WAIT_S = 5.0
# Fields BullMQ's readers take as numbers; every other field is a string, as in Redis.
_NUMERIC_FIELDS = ("attemptsMade", "delay")
# How long a queue's `<queue>:qe` session outlives its last read: a QueueEvents reads again
# at once after each read (at most blocking_timeout long), or after its backoff (<= 2 s)
# when a read failed, so a reader between two reads stays listed.
READER_LINGER_S = 5.0


class Events(EventReaders):
    """Reads the stream."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # queue -> reads under way, and the timer that ends its `:qe` session after the last
        self._readers: dict[str, int] = {}
        self._reader_gone: dict[str, asyncio.TimerHandle] = {}
        self._unannouncing: set[asyncio.Task[None]] = set()

    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        await self._reader_started(queue)
        try:
            return await self._read_events(queue, last_id, count, block_ms)
        finally:
            self._reader_ended(queue)

    async def _reader_started(self, queue: str) -> None:
        """Count a read of `queue`; the first takes its lease (readers.py) and holds its
        `<queue>:qe` session (best-effort, as a worker's: presence.py)."""
        gone = self._reader_gone.pop(queue, None)
        if gone is not None:
            gone.cancel()
        self._readers[queue] = self._readers.get(queue, 0) + 1
        try:
            await self._hold_lease(queue)
        except BaseException:
            self._reader_ended(queue)
            raise
        if self.settings.announce_workers:
            await self._sessions().add(_reader_key(queue), queue_events_session_name(queue))

    def _reader_ended(self, queue: str) -> None:
        left = self._readers[queue] = self._readers[queue] - 1
        if left == 0:
            del self._readers[queue]
            loop = asyncio.get_running_loop()
            self._reader_gone[queue] = loop.call_later(READER_LINGER_S, self._unannounce, queue)

    def _reading(self, queue: str) -> bool:
        return queue in self._readers

    def _unannounce(self, queue: str) -> None:
        """No read of `queue` for READER_LINGER_S: its lease ends, its `:qe` session closes."""
        self._reader_gone.pop(queue, None)
        if queue in self._readers:
            return
        task = asyncio.ensure_future(self._stop_reading(queue))
        self._unannouncing.add(task)
        task.add_done_callback(self._unannouncing.discard)

    async def _stop_reading(self, queue: str) -> None:
        try:
            await self._release_lease(queue)
        except PsyqError as exc:  # the lease expires by itself (readers.READER_LEASE_S)
            log.warning("psyq: ending the event reader's lease of %r failed: %s", queue, exc)
        if self._presence is not None and queue not in self._readers:
            await self._presence.remove(_reader_key(queue))

    async def close(self) -> None:
        for timer in self._reader_gone.values():
            timer.cancel()
        self._reader_gone.clear()
        await super().close()

    async def _read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        after = int(await self._newest(queue)) if last_id == "$" else int(last_id)
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
        if rows:
            rows = await self._settled(queue, after, rows[-1]["id"])
        return [(str(row["id"]), row["event"], _fields(row["data"])) for row in rows]

    async def _settled(self, queue: str, after: int, newest: int) -> list[Any]:
        """The events in (after, newest], once no transaction can still commit one there.

        Event ids come from one sequence but become visible in commit order: a writer that
        took id 10 may commit after one that took id 11, and a cursor already past 11 would
        never read 10. So the read waits (boundedly) for the transactions writing to
        `event` at that moment to end, then reads the range again."""
        writers = await self._value("events.writers")
        deadline = time.monotonic() + SETTLE_WAIT_S
        pause = 0.001
        while writers and time.monotonic() < deadline:
            if not await self._value("events.writing", writers):
                break
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
        return await self._rows("events.read_upto", queue, after, newest)

    async def start_reading_events(self, queue: str) -> None:
        """Take the queue's lease (kept while reads follow: READER_LINGER_S)."""
        await self._reader_started(queue)
        self._reader_ended(queue)

    async def newest_event_id(self, queue: str) -> str:
        """Read under the queue's lease, taken first: a reader's "$" is fixed after its
        lease is committed, so every event after its starting point is written."""
        await self._reader_started(queue)
        try:
            return await self._newest(queue)
        finally:
            self._reader_ended(queue)

    async def _newest(self, queue: str) -> str:
        return str(await self._value("events.newest", queue))

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        await self._rows("events.max_len", queue, str(max_len))

    async def publish_event(
        self, queue: str, event: str, fields: Mapping[str, Any], max_events: int
    ) -> None:
        """Through the layout's publish_event, which trims by the queue's maxLenEvents."""
        await self._rows("events.publish", queue, event, json.dumps(dict(fields)))


def _reader_key(queue: str) -> tuple[str, str, str]:
    """The Presence key of a queue's `:qe` session (workers' keys are pairs)."""
    return ("queue-events", queue, ":qe")


def _fields(data: str) -> dict[str, Any]:
    """An event's data as BullMQ's stream fields: strings, but attemptsMade and delay."""
    fields: dict[str, Any] = json.loads(data)
    for key, value in fields.items():
        if key in _NUMERIC_FIELDS:
            fields[key] = int(float(value))
        elif not isinstance(value, str):
            fields[key] = json.dumps(value)
    return fields
