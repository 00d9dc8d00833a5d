"""QueueEvents: reading the queue's `events` stream (XREAD BLOCK on a dedicated connection)
and bounding it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from psyq.backends.redis.connection import CONNECTION_ERRORS, RedisConnection
from psyq.errors import InvalidOptionsError, PsyqError

_NUMERIC_EVENT_FIELDS = ("attemptsMade", "delay")
_STREAM_ID = re.compile(r"\d+(-\d+)?")


class Events(RedisConnection):
    """The events stream."""

    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        key = self.queue_key(queue) + ":events"
        start = _stream_id(last_id)
        client = self._blocking if block_ms > 0 else self._client
        if client is None:
            raise PsyqError(f"the Redis backend {self.safe_url!r} is not open")
        try:
            reply = await self._uncancelled(self._xread(client, key, start, count, block_ms))
        except CONNECTION_ERRORS as exc:
            raise self._lost(f"reading {key!r}", exc) from exc
        return [
            _event(entry_id, fields)
            for _stream, entries in reply or ()
            for entry_id, fields in entries
        ]

    async def _xread(self, client: Any, key: str, start: str, count: int, block_ms: int) -> Any:
        """XREAD of one stream. On a cluster it goes to the node of the key's slot as the
        client's slot map says, read again first when a lost connection marked it stale:
        redis-py would ask one fixed node (COMMAND GETKEYS: XREAD's keys are movable) where
        the key lives, and once that node is dead every read would fail (issue 39)."""
        if not self.cluster:
            return await client.xread({key: start}, count=count, block=block_ms or None)
        await client.initialize()  # does nothing unless the map was marked stale
        block = ("BLOCK", block_ms) if block_ms else ()
        command = ("XREAD", "COUNT", count, *block, "STREAMS", key, start)
        return await client.execute_command(*command, target_nodes=client.get_node_from_key(key))

    async def newest_event_id(self, queue: str) -> str:
        key = self.queue_key(queue) + ":events"
        try:
            newest = await self.client.xrevrange(key, count=1)
        except CONNECTION_ERRORS as exc:
            raise self._lost(f"reading {key!r}", exc) from exc
        return str(newest[0][0]) if newest else "0"

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        key = self.queue_key(queue)
        await self.client.hset(key + ":meta", "opts.maxLenEvents", max_len)
        await self.client.xtrim(key + ":events", maxlen=max_len, approximate=False)

    async def publish_event(
        self, queue: str, event: str, fields: Mapping[str, Any], max_events: int
    ) -> None:
        key = self.queue_key(queue) + ":events"
        entry = {"event": event, **fields}
        await self.client.xadd(key, entry, maxlen=max_events, approximate=True)


def _stream_id(event_id: str) -> str:
    """XREAD's start id for QueueEvents' last_event_id ("$", "0" or a seen id)."""
    if event_id == "$":
        return "$"
    if not isinstance(event_id, str) or not _STREAM_ID.fullmatch(event_id):
        raise InvalidOptionsError(
            f"event id must be '$', '0' or an id like '1700000000000-5', got {event_id!r}",
            option="last_event_id",
        )
    return "0-0" if event_id == "0" else event_id


def _event(entry_id: str, fields: Mapping[str, str]) -> tuple[str, str, dict[str, Any]]:
    args: dict[str, Any] = dict(fields)
    event = str(args.pop("event", ""))
    for name in _NUMERIC_EVENT_FIELDS:
        if name in args:
            args[name] = int(float(args[name]))
    return entry_id, event, args
