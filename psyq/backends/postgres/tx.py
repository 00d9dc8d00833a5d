"""`Tx`: one transition's transaction — its connection, the store's clock, and the events
and wake-ups it produces, written just before the commit (events.sql).

Events are appended without a number (see sql/events.sql): writers of a queue share no lock
for them; the sequencer numbers them before they are read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from psyq.backends.postgres.queries import Queries

__all__ = ["Tx", "queue_of"]

Fields = dict[str, Any] | None
# Writers number (and trim) a queue's events about once per this many events appended.
SEQUENCE_EVERY = 1000


def queue_of(qkey: str) -> str:
    """The queue name of a queue key "<prefix>:<queue>"."""
    return qkey.split(":", 1)[1]


class Tx:
    def __init__(self, conn: asyncpg.Connection, queries: Queries, channel: str) -> None:
        self.conn = conn
        self.q = queries
        self.channel = channel
        self._now: int | None = None
        self._events: dict[str, list[tuple[str, str | None, str]]] = {}
        self._wakes: set[str] = set()
        self.to_sequence: set[str] = set()  # queues whose unnumbered events piled up

    # ------------------------------------------------------------------ running statements
    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await self.conn.fetch(self.q[name], *args)
        return rows

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        row: asyncpg.Record | None = await self.conn.fetchrow(self.q[name], *args)
        return row

    async def fetchval(self, name: str, *args: Any) -> Any:
        return await self.conn.fetchval(self.q[name], *args)

    async def execute(self, name: str, *args: Any) -> None:
        await self.conn.execute(self.q[name], *args)

    async def now(self) -> int:
        """The store's clock at the start of this transaction (ms)."""
        if self._now is None:
            self._now = int(await self.fetchval("common.now"))
        return self._now

    def know_now(self, now: int) -> None:
        self._now = now

    # ------------------------------------------------------------------ effects
    def emit(self, qkey: str, event: str, job_id: str | None = None, fields: Fields = None) -> None:
        text = "{}" if not fields else json.dumps(fields, separators=(",", ":"))
        self._events.setdefault(qkey, []).append((event, job_id, text))

    def wake(self, qkey: str) -> None:
        """Workers blocked on `qkey` should look again once this commits."""
        self._wakes.add("j:" + qkey)

    def note_events(self, qkey: str, last_id: int | None, count: int) -> None:
        """A statement appended `count` events itself (the newest has id `last_id`)."""
        if last_id is not None and last_id // SEQUENCE_EVERY != (last_id - count) // SEQUENCE_EVERY:
            self.to_sequence.add(qkey)

    async def flush(self) -> None:
        for qkey in sorted(self._events):
            events = self._events[qkey]
            last_id = await self.fetchval(
                "events.append",
                qkey,
                [e[0] for e in events],
                [e[1] for e in events],
                [e[2] for e in events],
                self.channel,
            )
            if last_id // SEQUENCE_EVERY != (last_id - len(events)) // SEQUENCE_EVERY:
                self.to_sequence.add(qkey)
        if self._wakes:
            await self.execute("events.wake", self.channel, sorted(self._wakes))
        self._events.clear()
        self._wakes.clear()

    def drop_effects(self, mark: tuple[dict[str, int], set[str]]) -> None:
        """Forget events and wake-ups recorded after `mark` (a rolled-back savepoint)."""
        counts, wakes = mark
        for qkey in list(self._events):
            keep = counts.get(qkey, 0)
            del self._events[qkey][keep:]
            if not self._events[qkey]:
                del self._events[qkey]
        self._wakes = set(wakes)

    def mark(self) -> tuple[dict[str, int], set[str]]:
        return {k: len(v) for k, v in self._events.items()}, set(self._wakes)


def json_text(value: Sequence[str] | Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
