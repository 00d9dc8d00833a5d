"""psyq's own set-based statements for plain jobs (sql/fast.sql): adding, completing and
taking in one round trip each, with the rows, events, NOTIFYs and advisory locks of the
layout's functions; whatever they leave (custom ids, flows, deduplication, pause, limits,
concurrency, due delayed jobs, refusals) the caller sends through the layout's functions.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from psyq.backends.base import Completed, Failed, FetchRequest, Retry, Settlement
from psyq.backends.postgres.connection import BullmqConnection

__all__ = ["FastPath", "Taken", "worker_keep"]


def worker_keep(outcome: Completed | Failed | Retry) -> str | None:
    """The worker's removeOnComplete/removeOnFail of a settlement, as the statements take it
    (JSON text; None: none, the job's own options decide)."""
    keep = None if isinstance(outcome, Retry) else outcome.keep
    return None if keep is None else json.dumps(keep)


class Taken:
    """What `fast.settle_take` did: the rows taken (in token order), the ids it left for
    the layout's move_to_completed, whether the take needs the layout's move_to_active,
    the psyq_finished row id of the batch's count (None when nothing completed), and, when
    it took fewer jobs than asked, whether no other job was waiting (`idle`) and the ms
    until the next delayed job is due (`next_ms`, None: none or not known)."""

    __slots__ = ("counted", "fallback", "idle", "left", "next_ms", "rows")

    def __init__(self, records: list[asyncpg.Record]) -> None:
        taken = [row for row in records if row["psyq_slot"] is not None]
        self.rows = sorted(taken, key=lambda row: int(row["psyq_slot"]))
        self.left = [row["psyq_left"] for row in records if row["psyq_left"] is not None]
        status = [row for row in records if row["psyq_slot"] is None and row["psyq_left"] is None]
        self.fallback = bool(status and status[0]["psyq_fallback"])
        self.counted: int | None = status[0]["psyq_counted"] if status else None
        self.idle = bool(status and status[0]["psyq_idle"])
        self.next_ms: int | None = status[0]["psyq_next_ms"] if status else None


class FastPath(BullmqConnection):
    """The set-based statements; each returns None (or leaves work) where the layout's
    functions must run instead."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # queue -> a future per settle-and-take of this process under way that takes jobs
        # (it holds the rows it picked until it commits), done when it ends
        self._taking: dict[str, set[asyncio.Future[None]]] = {}

    async def _add_plain(self, queue: str, entries: Sequence[dict[str, Any]]) -> Any:
        """Add plain jobs (no custom id, parent or deduplication) in one statement; None
        when the queue has no id sequence yet (the layout's add creates it)."""
        columns = (
            [entry["name"] for entry in entries],
            [entry["data"] for entry in entries],
            [json.dumps(entry["opts"]) for entry in entries],
            [int(entry["priority"]) for entry in entries],
            [int(entry["delay"]) for entry in entries],
            [entry.get("timestamp") for entry in entries],
            [int(entry["attempts"]) for entry in entries],
            [bool(entry["lifo"]) for entry in entries],
        )

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record] | None:
            try:
                rows: list[asyncpg.Record] = await conn.fetch(self._q["fast.add"], queue, *columns)
            except asyncpg.UndefinedTableError:
                return None
            return rows

        return await self._on_connection(run)

    async def _settle_take(
        self, queue: str, done: Sequence[Settlement], fetch: FetchRequest | None
    ) -> Taken:
        """Complete `done` (all Completed) and take for `fetch`, in one statement."""
        tokens = list(fetch.tokens) if fetch is not None else []
        values = [item.outcome.returnvalue for item in done if isinstance(item.outcome, Completed)]
        under_way: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if tokens:
            self._taking.setdefault(queue, set()).add(under_way)
        try:
            rows = await self._rows(
                "fast.settle_take",
                queue,
                [item.job_id for item in done],
                [item.token for item in done],
                values,
                tokens,
                fetch.lock_duration if fetch is not None else 0,
                fetch.worker_name if fetch is not None else None,
                fetch is not None and fetch.limiter is not None,
                [worker_keep(item.outcome) for item in done],
            )
        finally:
            taking = self._taking.get(queue)
            if taking is not None:
                taking.discard(under_way)
                if not taking:
                    del self._taking[queue]
            under_way.set_result(None)
        return Taken(rows)
