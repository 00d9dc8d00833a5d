"""psyq's own set-based statements for plain jobs (sql/fast.sql): adding, completing and
taking in one round trip each, with the rows, events, NOTIFYs and advisory locks of the
layout's functions; whatever they leave (custom ids, flows, deduplication, pause, limits,
concurrency, due delayed jobs, refusals) the caller sends through the layout's functions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from psyq.backends.base import Completed, Failed, FetchRequest, Retry, Settlement
from psyq.backends.postgres.transaction import Transactional

__all__ = ["FastPath", "HeldTokens", "Taken", "TrimMarks", "worker_keep"]


def worker_keep(outcome: Completed | Failed | Retry) -> str | None:
    """The worker's removeOnComplete/removeOnFail of a settlement, as the statements take it
    (JSON text; None: none, the job's own options decide)."""
    keep = None if isinstance(outcome, Retry) else outcome.keep
    return None if keep is None else json.dumps(keep)


class TrimMarks:
    """Per queue, the event id up to which this process's trims deleted, so the next trim
    starts there (the statements' $10) instead of at the queue's first event: the entries
    of trimmed events stay in `event`'s index until a vacuum, and a trim from the start
    steps over every one of them (design record 0003). A trim that starts from nothing
    known runs once a minute per queue and process, for any event a late commit left below
    a mark."""

    SWEEP_S = 60.0

    __slots__ = ("_clock", "_marks")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._marks: dict[str, tuple[int, float]] = {}  # queue -> (mark, last full trim)

    def since(self, queue: str) -> int | None:
        """Where the next trim of `queue` may start (None: from its first event)."""
        mark = self._marks.get(queue)
        if mark is None or self._clock() - mark[1] >= self.SWEEP_S:
            return None
        return mark[0]

    def record(self, queue: str, since: int | None, upto: int | None) -> None:
        """A statement sent with `since` trimmed up to `upto` (None: it did not trim)."""
        if upto is None:
            return
        mark = self._marks.get(queue)
        if since is None or mark is None:
            self._marks[queue] = (upto, self._clock())
        else:
            self._marks[queue] = (max(mark[0], upto), mark[1])


class HeldTokens:
    """A take's tokens, less those an earlier attempt of the same call took jobs under
    before its connection was lost (its commit done, its reply lost): those jobs are the
    caller's, handed to it with the rest (`rows`) instead of left active until their
    locks expire, and their tokens are not used again (one job per token). `completes`:
    the job a call with the caller's own tokens completes (move_to_finished), whose
    completion the lost attempt's jobs must follow (transitions.held_after)."""

    __slots__ = ("completes", "queue", "rows", "tokens")

    def __init__(self, queue: str, tokens: Sequence[str], completes: str | None = None) -> None:
        self.queue = queue
        self.tokens = list(tokens)
        self.rows: list[asyncpg.Record] = []
        self.completes = completes

    async def recover(self, conn: asyncpg.Connection, held: str, held_after: str) -> None:
        """Before an attempt is sent again: the jobs active under the tokens (statement
        `held`, transitions.held, or `held_after`) are the lost attempt's."""
        if not self.tokens:
            return
        if self.completes is None:
            rows = await conn.fetch(held, self.queue, self.tokens)
        else:
            rows = await conn.fetch(held_after, self.queue, self.tokens, self.completes)
        taken = {row["lock_token"] for row in rows}
        self.rows += rows
        self.tokens = [token for token in self.tokens if token not in taken]

    def rest(self, fetch: FetchRequest | None) -> FetchRequest | None:
        """`fetch` for the tokens left (None when there is none to take for)."""
        if fetch is None or not self.rows:
            return fetch
        return dataclasses.replace(fetch, tokens=list(self.tokens)) if self.tokens else None


class Taken:
    """What `fast.settle_take` did: the rows taken (in token order), the ids it left for
    the layout's move_to_completed, whether the take needs the layout's move_to_active,
    the psyq_finished row id of the batch's count (None when nothing completed), and, when
    it took, whether no other job was left waiting (`idle`) and the ms until the next
    delayed job is due (`next_ms`, None: none or not known)."""

    __slots__ = ("counted", "fallback", "held", "idle", "left", "next_ms", "rows", "trimmed_to")

    def __init__(self, records: list[asyncpg.Record], held: HeldTokens) -> None:
        self.held = held  # the jobs an attempt lost with its connection took, if any
        taken = [row for row in records if row["psyq_slot"] is not None]
        self.rows = sorted(taken, key=lambda row: int(row["psyq_slot"]))
        self.left = [row["psyq_left"] for row in records if row["psyq_left"] is not None]
        status = [row for row in records if row["psyq_slot"] is None and row["psyq_left"] is None]
        self.fallback = bool(status and status[0]["psyq_fallback"])
        self.counted: int | None = status[0]["psyq_counted"] if status else None
        self.idle = bool(status and status[0]["psyq_idle"])
        self.next_ms: int | None = status[0]["psyq_next_ms"] if status else None
        self.trimmed_to: int | None = status[0]["psyq_trimmed_to"] if status else None


class FastPath(Transactional):
    """The set-based statements; each returns None (or leaves work) where the layout's
    functions must run instead."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # queue -> a future per settle-and-take of this process under way that takes jobs
        # (it holds the rows it picked until it commits), done when it ends
        self._taking: dict[str, set[asyncio.Future[None]]] = {}
        # queue -> (a job notification's future, registered before a take that found no
        # other job waiting; the loop time the next delayed job is due, or None): the idle
        # mark (transitions.py, move_to_active)
        self._idle: dict[str, tuple[asyncio.Future[None], float | None]] = {}
        self._trims = TrimMarks()

    def _made_waiting(self, queue: str) -> None:
        """This process added jobs to `queue` or put some back in line (a retry, a stall, a
        hand-back, a promotion): its next take asks the server rather than trust the idle
        mark until the notification comes back (a non-blocking take right after must see
        the job). The notification's future stays registered: a wait on it still ends with
        the notification."""
        self._idle.pop(queue, None)

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

        since = self._trims.since(queue)

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record] | None:
            try:
                rows: list[asyncpg.Record] = await conn.fetch(
                    self._q["fast.add"], queue, *columns, since
                )
            except asyncpg.UndefinedTableError:
                return None
            return rows

        rows = await self._on_connection(run)
        if rows:
            self._trims.record(queue, since, rows[0]["trimmed_to"])
        return rows

    async def _settle_take(
        self,
        queue: str,
        done: Sequence[Settlement],
        fetch: FetchRequest | None,
        completes: str | None = None,
    ) -> Taken:
        """Complete `done` (all Completed) and take for `fetch`, in one statement;
        `completes`: see HeldTokens."""
        held = HeldTokens(queue, fetch.tokens if fetch is not None else [], completes)
        values = [item.outcome.returnvalue for item in done if isinstance(item.outcome, Completed)]
        under_way: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        since = self._trims.since(queue)
        if held.tokens:
            self._taking.setdefault(queue, set()).add(under_way)

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            rows: list[asyncpg.Record] = await conn.fetch(
                self._q["fast.settle_take"],
                queue,
                [item.job_id for item in done],
                [item.token for item in done],
                values,
                held.tokens,
                fetch.lock_duration if fetch is not None else 0,
                fetch.worker_name if fetch is not None else None,
                fetch is not None and fetch.limiter is not None,
                [worker_keep(item.outcome) for item in done],
                since,
            )
            return rows

        try:
            rows = await self._on_connection(run, self._recover_into(held))
        finally:
            taking = self._taking.get(queue)
            if taking is not None:
                taking.discard(under_way)
                if not taking:
                    del self._taking[queue]
            under_way.set_result(None)
        taken = Taken(rows, held)
        self._trims.record(queue, since, taken.trimmed_to)
        return taken

    def _recover_into(self, held: HeldTokens) -> Callable[[asyncpg.Connection], Awaitable[None]]:
        """The after-loss step of a call that takes for `held`'s tokens."""
        statements = self._q["transitions.held"], self._q["transitions.held_after"]
        return lambda conn: held.recover(conn, *statements)
