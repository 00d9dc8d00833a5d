"""`postgresql://`: the BackendAdapter over PostgreSQL (asyncpg), fetching with SKIP LOCKED.

Every transition is one transaction (`_transact`): it runs named statements from sql/,
records its events, and appends them just before the commit. Deadlocks, serialization
failures and lost connections retry the whole transaction. Workers and event readers wait
on LISTEN/NOTIFY with a timeout, so a lost notification only costs latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg

from psyq.backends.base import (
    JOB_STATES,
    BackendAdapter,
    Completed,
    ExportPage,
    Failed,
    FetchRequest,
    FlowNode,
    JobRecord,
    Limiter,
    NewJob,
    Retry,
    Settlement,
    StalledResult,
)
from psyq.backends.native.eventlog import parse_event_id
from psyq.backends.native.metrics import MAX_DATA_POINTS
from psyq.backends.postgres import export
from psyq.backends.postgres import transitions as t
from psyq.backends.postgres.config import PostgresSettings, parse_postgres_url
from psyq.backends.postgres.migrate import migrate
from psyq.backends.postgres.notifier import Notifier
from psyq.backends.postgres.queries import load_queries
from psyq.backends.postgres.records import to_record
from psyq.backends.postgres.tx import SEQUENCE_EVERY, Tx, json_text, queue_of
from psyq.core import codec
from psyq.core.backoff import Reconnect
from psyq.errors import ConnectionError, InvalidOptionsError, JobNotFoundError, PsyqError

__all__ = ["PostgresBackend"]

T = TypeVar("T")
# A settle_many of at least this many jobs is settled as two concurrent transactions.
SPLIT_SETTLES_FROM = 40
log = logging.getLogger("psyq.postgres")

# A transaction that lost to another one: run it again at once.
CONFLICTS = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
# The server or the connection went away (a restart, a killed session): run it again after
# the backend's shared reconnect backoff.
CONNECTION_LOST = (
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08, e.g. the connection does not exist
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,  # the server is starting up or shutting down
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # a connection left mid-operation by a kill
    OSError,
    TimeoutError,  # a statement past command_timeout, or no pool connection in time
)


@contextlib.asynccontextmanager
async def _transaction(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """`conn.transaction()`, but a call cancelled inside it (a worker closing while it
    fetches) drops the connection instead of rolling back: asyncpg first waits for the
    server to acknowledge the cancelled statement, and on a connection whose server side
    was just killed that wait was seen never to end (the worker's close hung). The server
    rolls back a transaction whose connection is gone; the pool opens a new one."""
    transaction = conn.transaction()
    await _or_terminate(conn, transaction.start())
    try:
        yield
    except asyncio.CancelledError:
        conn.terminate()
        raise
    except BaseException:
        await _or_terminate(conn, transaction.rollback())
        raise
    await _or_terminate(conn, transaction.commit())


async def _or_terminate(conn: asyncpg.Connection, step: Awaitable[None]) -> None:
    """Await a BEGIN, COMMIT or ROLLBACK; cancelled on the way, drop the connection (its
    transaction state is unknown; the pool would otherwise roll back gracefully, and warn)."""
    try:
        await step
    except asyncio.CancelledError:
        conn.terminate()
        raise


class PostgresBackend(BackendAdapter):
    kind = "postgres"
    batch_settles = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.settings: PostgresSettings = parse_postgres_url(url)
        self._prefix = self.settings.prefix + ":"
        self._q = load_queries()
        self._pool: asyncpg.Pool | None = None
        self._notifier: Notifier | None = None
        self._reconnect = Reconnect()  # paces every call while the server does not answer
        self._workers: dict[tuple[str, str], str] = {}  # (qkey, name) -> info, registered here
        self._heartbeat: asyncio.Task[None] | None = None
        self._registry_writes = asyncio.Lock()  # a renewal never revives an unregistered entry

    # ------------------------------------------------------------------ lifecycle
    def _server_settings(self) -> dict[str, str]:
        """Session settings of psyq's connections. Bitmap scans are off: a queue's rows
        churn faster than autovacuum analyzes them, and with statistics that say "a few
        rows" the planner fetched every ready job of a queue by bitmap scan and sorted them
        to take the first n (10 ms per take at 10k waiting jobs) instead of reading n
        entries of the ordered index; every psyq statement is served by btree paths."""
        settings = self.settings
        return {
            "search_path": settings.schema,
            "application_name": settings.application_name,
            "enable_bitmapscan": "off",
        }

    async def _connect(self) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            self.settings.dsn, server_settings=self._server_settings()
        )
        return conn

    async def open(self) -> None:
        try:
            conn = await self._connect()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise ConnectionError(self.url, str(exc) or type(exc).__name__) from exc
        try:
            await migrate(conn, self.settings.schema)
        finally:
            await conn.close()
        self._pool = await asyncpg.create_pool(
            self.settings.dsn,
            min_size=self.settings.pool_min,
            max_size=self.settings.pool_max,
            command_timeout=self.settings.command_timeout,
            server_settings=self._server_settings(),
            reset=_keep_session,
        )
        self._notifier = Notifier(self._connect, self.settings.channel, self._announce)
        await self._notifier.start()

    async def close(self) -> None:
        await self._stop_heartbeat()
        if self._notifier is not None:
            await self._forget(self._notifier.listener_id)
            await self._notifier.close()
            self._notifier = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise PsyqError(f"the postgres backend {self.url!r} is not open")
        return self._pool

    @property
    def notifier(self) -> Notifier:
        if self._notifier is None:
            raise PsyqError(f"the postgres backend {self.url!r} is not open")
        return self._notifier

    def _key(self, queue: str) -> str:
        return self._prefix + queue

    # ------------------------------------------------------------------ running
    def _acquire(self) -> Any:
        """A pool connection, waiting at most command_timeout for one."""
        return self.pool.acquire(timeout=self.settings.command_timeout)

    async def _retrying(self, run: Callable[[], Awaitable[T]]) -> T:
        """Run `run`; run it again after a deadlock or a lost connection. Every connection of
        the pool may have died at once (a server restart), so there is one try more than
        the pool has connections; while the server does not answer, every caller of this
        backend waits on one capped, jittered backoff (50 ms doubling to 2 s), so a
        restarting server sees a few attempts per second. What still fails is raised as a
        psyq error (ConnectionError when the server could not be reached)."""
        tries = self.settings.pool_max + 3
        for attempt in range(tries):
            await self._reconnect.wait()
            try:
                result = await run()
            except CONFLICTS as exc:
                self._give_up_after(attempt, tries, exc)
            except CONNECTION_LOST as exc:
                self._reconnect.failed()
                self._give_up_after(attempt, tries, exc)
            except asyncpg.PostgresError as exc:
                raise PsyqError(f"postgres error in {self.url!r}: {exc}") from exc
            else:
                self._reconnect.succeeded()
                return result
        raise AssertionError("unreachable")

    def _give_up_after(self, attempt: int, tries: int, exc: BaseException) -> None:
        """Log a retry, or raise ConnectionError when `attempt` was the last."""
        if attempt == tries - 1:
            raise ConnectionError(self.url, f"{type(exc).__name__}: {exc}") from exc
        log.warning("psyq: postgres call retried after %r", exc)

    async def _transact(self, action: Callable[[Tx], Awaitable[T]]) -> T:
        """Run `action` in one transaction (retried whole), then number the events of
        queues whose unnumbered events piled up."""

        async def run() -> tuple[T, set[str]]:
            async with self._acquire() as conn, _transaction(conn):
                tx = Tx(conn, self._q, self.settings.channel)
                result = await action(tx)
                await tx.flush()
            return result, tx.to_sequence

        result, to_sequence = await self._retrying(run)
        for qkey in to_sequence:
            await self._sequence(qkey)
        return result

    async def _sequence(self, qkey: str) -> int:
        """Number the queue's committed events (and trim past max_len); returns the newest
        sequence number."""

        async def sequence(tx: Tx) -> int:
            await tx.execute("common.ensure_queue", qkey, queue_of(qkey))
            queue = await tx.fetchrow("events.lock_queue", qkey)
            assert queue is not None
            newest = int(await tx.fetchval("events.number", qkey, queue["event_seq"]))
            if newest != queue["event_seq"]:
                trim = newest - queue["max_len_events"]
                await tx.execute("events.store_seq", qkey, newest, trim)
            if newest // SEQUENCE_EVERY != queue["event_seq"] // SEQUENCE_EVERY:
                await tx.execute("common.fold_metrics", qkey)
            return newest

        return await self._transact(sequence)

    async def _read(self, name: str, *args: Any) -> list[asyncpg.Record]:
        """Run one statement on its own (atomic by itself: no explicit transaction)."""

        async def run() -> list[asyncpg.Record]:
            async with self._acquire() as conn:
                rows: list[asyncpg.Record] = await conn.fetch(self._q[name], *args)
                return rows

        return await self._retrying(run)

    async def _value(self, name: str, *args: Any) -> Any:
        rows = await self._read(name, *args)
        return rows[0][0] if rows else None

    async def _announce(self, keys: list[str], listener: str, ttl_ms: int) -> None:
        """Write the entries once no transaction that decided without them is still open
        (listeners.lock), so the waiter's read that follows sees what those wrote."""

        async def run() -> None:
            async with self._acquire() as conn, _transaction(conn):
                await conn.execute(self._q["listeners.lock"], keys, self.settings.channel)
                await conn.execute(self._q["listeners.announce"], keys, listener, ttl_ms)

        await self._retrying(run)

    async def _forget(self, listener: str) -> None:
        """Drop this backend's listener entries, one try (they expire if the server is away)."""
        try:
            async with self._acquire() as conn:
                await conn.execute(self._q["listeners.forget"], listener, timeout=2)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("psyq: could not drop listener entries at close: %r", exc)

    async def now_ms(self) -> int:
        return int(await self._value("common.now"))

    # ------------------------------------------------------------------ adding
    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        qkey = self._key(queue)
        if jobs and all(t.is_plain(new) for new in jobs):
            return await self._add_plain(queue, qkey, jobs)
        return await self._transact(lambda tx: t.add_jobs(tx, qkey, jobs))

    async def _add_plain(self, queue: str, qkey: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        """Jobs without custom id, dedup key or parent: one statement does the whole add,
        and returns only the ids' end and the clock (the records are built here)."""
        [row] = await self._read(
            "add_jobs.insert_plain", qkey, queue, *t.plain_columns(jobs), self.settings.channel
        )
        first = int(row["last_id"]) - len(jobs) + 1
        now = int(row["now"])
        return [t.plain_record(queue, str(first + i), new, now) for i, new in enumerate(jobs)]

    # ------------------------------------------------------------------ fetching
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        qkey = self._key(queue)
        return await self._transact(lambda tx: t.move_to_active(tx, qkey, request))

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        key = "j:" + self._key(queue)
        await self.notifier.listen_for(key)
        future = self.notifier.register(key)
        try:
            ready = await self._value("wait_for_job", self._key(queue))
            if ready == 0:
                return
            wait = timeout_ms if ready is None else min(timeout_ms, int(ready))
            await self.notifier.wait(future, wait)
        finally:
            self.notifier.discard(key, future)

    # ------------------------------------------------------------------ settling
    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        qkey = self._key(queue)

        async def finish(tx: Tx) -> list[JobRecord]:
            [error] = await t.finish_many(tx, qkey, [(job_id, token, outcome)])
            if error is not None:
                raise error
            return await t.move_to_active(tx, qkey, fetch) if fetch is not None else []

        return await self._transact(finish)

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        """Settle the batch and fetch; a large batch is settled as two halves in two
        transactions on two connections at once (each fetching its share), so the server
        works on both while the other commits."""
        half = len(settlements) // 2
        if half < SPLIT_SETTLES_FROM // 2 or self.settings.pool_max < 2:
            return await self._settle_chunk(queue, settlements, fetch)
        wanted = len(fetch.tokens) if fetch is not None else 0
        firsts, seconds = _split_fetch(fetch, wanted // 2)
        halves = await asyncio.gather(
            self._settle_chunk(queue, settlements[:half], firsts),
            self._settle_chunk(queue, settlements[half:], seconds),
            return_exceptions=True,
        )
        if isinstance(halves[0], BaseException) or isinstance(halves[1], BaseException):
            await self._undo_fetches(queue, halves)
        (errors, fetched), (more_errors, more_fetched) = halves  # type: ignore[misc]
        return errors + more_errors, fetched + more_fetched

    async def _undo_fetches(self, queue: str, halves: Sequence[Any]) -> None:
        """One half of a split settle failed: the caller retries the whole batch, so the
        jobs the other half fetched go back to waiting now (not at their lease's end);
        then the failure is raised."""
        for half in halves:
            if isinstance(half, BaseException):
                continue
            for record in half[1]:
                try:
                    await self.move_job_from_active_to_wait(
                        queue, record.id, record.lock_token or ""
                    )
                except PsyqError as exc:  # the stall check recovers it when its lease ends
                    log.warning("psyq: could not hand back job %r: %s", record.id, exc)
        raise next(half for half in halves if isinstance(half, BaseException))

    async def _settle_chunk(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        qkey = self._key(queue)

        async def settle(tx: Tx) -> tuple[list[PsyqError | None], list[JobRecord]]:
            errors: list[PsyqError | None] = [None] * len(settlements)
            finals = [(i, s) for i, s in enumerate(settlements) if not isinstance(s.outcome, Retry)]
            items = [(s.job_id, s.token, s.outcome) for _, s in finals]
            found = await t.finish_many(tx, qkey, items) if items else []  # type: ignore[arg-type]
            for (index, _), error in zip(finals, found, strict=True):
                errors[index] = error
            for index, item in enumerate(settlements):
                if isinstance(item.outcome, Retry):
                    errors[index] = await _savepoint(
                        tx, t.retry_job(tx, qkey, item.job_id, item.token, item.outcome)
                    )
            fetched = await t.move_to_active(tx, qkey, fetch) if fetch is not None else []
            return errors, fetched

        return await self._transact(settle)

    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        qkey = self._key(queue)
        await self._transact(lambda tx: t.retry_job(tx, qkey, job_id, token, outcome))

    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        qkey = self._key(queue)

        async def move(tx: Tx) -> None:
            await t.locked(tx, qkey, job_id, token, "delay")
            now = await tx.now()
            await t.delay(tx, qkey, job_id, timestamp_ms, max(0, timestamp_ms - now))

        await self._transact(move)

    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        qkey = self._key(queue)
        await self._transact(lambda tx: t.hand_back(tx, qkey, job_id, token))

    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        qkey, ids, tokens = self._key(queue), list(locks), list(locks.values())

        async def extend(tx: Tx) -> list[str]:
            rows = await tx.fetch("extend_locks.renew", qkey, ids, tokens, duration_ms)
            kept = {row["id"] for row in rows}
            if len(kept) < len(ids):
                rows = await tx.fetch("extend_locks.released", qkey, ids, tokens)
                kept |= {row["id"] for row in rows}
            return [job_id for job_id in ids if job_id not in kept]

        return await self._transact(extend)

    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        qkey = self._key(queue)
        return await self._transact(lambda tx: t.move_stalled(tx, qkey, max_stalled_count))

    # ------------------------------------------------------------------ queries
    async def get_job(self, queue: str, job_id: str) -> JobRecord | None:
        rows = await self._read("common.get_job", self._key(queue), job_id)
        return to_record(rows[0]) if rows else None

    async def get_state(self, queue: str, job_id: str) -> str:
        record = await self.get_job(queue, job_id)
        return "unknown" if record is None or record.state is None else record.state

    async def get_jobs(
        self, queue: str, states: Sequence[str], start: int, end: int, asc: bool
    ) -> list[JobRecord]:
        qkey = self._key(queue)

        async def read(tx: Tx) -> list[JobRecord]:
            paused = await tx.fetchval("get_jobs.is_paused", qkey)
            if len(states) == 1 and states[0] not in ("waiting", "paused"):
                return await _page(tx, qkey, states[0], start, end, asc)
            ids: list[str] = []
            for state in states:
                ids += await _ids_in(tx, qkey, state, paused, asc)
            stop = None if end == -1 else end + 1
            wanted = ids[start:stop]
            rows = await tx.fetch("get_jobs.by_ids", qkey, wanted)
            by_id = {row["id"]: row for row in rows}
            return [to_record(by_id[i]) for i in wanted if i in by_id]

        return await self._transact(read)

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]:
        qkey = self._key(queue)

        async def read(tx: Tx) -> dict[str, int]:
            paused = await tx.fetchval("get_jobs.is_paused", qkey)
            found = {row["state"]: row["n"] for row in await tx.fetch("get_jobs.counts", qkey)}
            return {state: _count(found, state, paused) for state in states or JOB_STATES}

        return await self._transact(read)

    async def get_job_logs(
        self, queue: str, job_id: str, start: int, end: int, asc: bool
    ) -> tuple[list[str], int]:
        rows = [row["row"] for row in await self._read("get_job_logs", self._key(queue), job_id)]
        ordered = rows if asc else rows[::-1]
        stop = None if end == -1 else end + 1
        return ordered[start:stop], len(rows)

    async def is_paused(self, queue: str) -> bool:
        return bool(await self._value("get_jobs.is_paused", self._key(queue)))

    async def list_queues(self) -> list[str]:
        return [row["name"] for row in await self._read("get_jobs.list_queues", self._prefix)]

    # ------------------------------------------------------------------ job mutations
    async def update_progress(self, queue: str, job_id: str, progress: Any) -> None:
        qkey = self._key(queue)
        text = codec.dumps(progress, "progress", job_id)

        async def update(tx: Tx) -> None:
            if await tx.fetchval("update_progress", qkey, job_id, text) is None:
                raise JobNotFoundError(queue, job_id)
            tx.emit(qkey, "progress", job_id, {"data": text})

        await self._transact(update)

    async def add_log(self, queue: str, job_id: str, row: str, keep_logs: int | None) -> int:
        qkey = self._key(queue)

        async def add(tx: Tx) -> int:
            if await tx.fetchrow("common.lock_job", qkey, job_id) is None:
                raise JobNotFoundError(queue, job_id)
            count = int(await tx.fetchval("add_log.append", qkey, job_id, row))
            if keep_logs is not None and count > keep_logs:
                await tx.execute("add_log.keep_newest", qkey, job_id, keep_logs)
                count = keep_logs
            return count

        return await self._transact(add)

    async def clear_logs(self, queue: str, job_id: str, keep: int) -> None:
        await self._read("add_log.keep_newest", self._key(queue), job_id, keep)

    async def update_data(self, queue: str, job_id: str, data: str) -> None:
        if await self._value("update_data", self._key(queue), job_id, data) is None:
            raise JobNotFoundError(queue, job_id)

    async def change_priority(
        self, queue: str, job_id: str, priority: int, lifo: bool = False
    ) -> None:
        qkey = self._key(queue)

        async def change(tx: Tx) -> None:
            row = await tx.fetchrow("change_priority", qkey, job_id, priority)
            if row is None:
                raise JobNotFoundError(queue, job_id)
            if row["state"] in t.READY:
                await tx.fetchrow("common.enqueue", qkey, job_id, lifo)
                tx.wake(qkey)

        await self._transact(change)

    async def change_delay(self, queue: str, job_id: str, delay_ms: int) -> None:
        qkey = self._key(queue)

        async def change(tx: Tx) -> None:
            await t.job_in_state(tx, qkey, job_id, ["delayed"], "change the delay of")
            await t.delay(tx, qkey, job_id, await tx.now() + delay_ms, delay_ms)

        await self._transact(change)

    async def promote(self, queue: str, job_id: str) -> None:
        qkey = self._key(queue)
        await self._transact(lambda tx: _promote(tx, qkey, job_id))

    async def reprocess_job(self, queue: str, job_id: str, state: str) -> None:
        qkey = self._key(queue)
        await self._transact(lambda tx: _reprocess(tx, qkey, job_id, state))

    async def remove_job(self, queue: str, job_id: str, remove_children: bool = True) -> bool:
        qkey = self._key(queue)
        return await self._transact(
            lambda tx: t.remove_unscheduled_job(tx, qkey, job_id, remove_children)
        )

    # ------------------------------------------------------------------ queue admin
    async def _set_paused(self, queue: str, paused: bool) -> None:
        qkey = self._key(queue)

        async def set_paused(tx: Tx) -> None:
            await tx.execute("common.ensure_queue", qkey, queue)
            if await tx.fetchrow("pause", qkey, paused):
                tx.emit(qkey, "paused" if paused else "resumed")
            if not paused:
                tx.wake(qkey)

        await self._transact(set_paused)

    async def pause(self, queue: str) -> None:
        await self._set_paused(queue, True)

    async def resume(self, queue: str) -> None:
        await self._set_paused(queue, False)

    async def drain(self, queue: str, delayed: bool) -> None:
        qkey = self._key(queue)

        async def drain(tx: Tx) -> None:
            ids = [row["id"] for row in await tx.fetch("drain", qkey, delayed)]
            if ids:
                await tx.fetch("common.drop_jobs", qkey, ids)

        await self._transact(drain)

    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        qkey = self._key(queue)

        async def clean(tx: Tx) -> list[str]:
            paused = await tx.fetchval("get_jobs.is_paused", qkey)
            stored = "waiting" if state == "paused" else state
            ids: list[str] = []
            if state not in ("waiting", "paused") or paused == (state == "paused"):
                cutoff = await tx.now() - grace_ms
                rows = await tx.fetch("clean", qkey, stored, cutoff, limit or None)
                ids = [row["id"] for row in rows]
            if ids:
                await tx.fetch("common.drop_jobs", qkey, ids)
            tx.emit(qkey, "cleaned", None, {"count": str(len(ids))})
            return ids

        return await self._transact(clean)

    async def obliterate(self, queue: str, force: bool) -> None:
        qkey = self._key(queue)

        async def obliterate(tx: Tx) -> None:
            active = await tx.fetchval("obliterate.active_count", qkey)
            if active and not force:
                raise PsyqError(
                    f"cannot obliterate queue {queue!r}: {active} jobs are active "
                    "(close their workers first, or pass force=True)"
                )
            await tx.execute("obliterate.remove", qkey)
            tx.wake(qkey)

        await self._transact(obliterate)

    async def retry_jobs(self, queue: str, state: str, count: int, timestamp_ms: int) -> int:
        qkey = self._key(queue)

        async def retry(tx: Tx) -> int:
            rows = await tx.fetch("retry_jobs", qkey, state, timestamp_ms, count or None)
            for row in rows:
                await _reprocess(tx, qkey, row["id"], state)
            return len(rows)

        return await self._transact(retry)

    async def promote_jobs(self, queue: str, count: int) -> int:
        qkey = self._key(queue)

        async def promote(tx: Tx) -> int:
            rows = await tx.fetch("promote_jobs", qkey, count or None)
            for row in rows:
                await _promote(tx, qkey, row["id"])
            return len(rows)

        return await self._transact(promote)

    # ------------------------------------------------------------------ flows
    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """One transaction. Trees without deduplication are written in a few batched
        statements; a node's dedup check depends on what the nodes before it wrote, so
        trees with one are added node by node, in pre-order."""
        if t.flow_has_dedup(roots):
            return await self.add_flow_node_by_node(roots)
        return await self._transact(lambda tx: t.add_flow(tx, roots, self._key))

    async def add_flow_node_by_node(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """add_flow, one add_jobs per node in pre-order (the reference the batched add
        matches)."""

        async def add(tx: Tx) -> list[JobRecord]:
            out: list[JobRecord] = []
            for root in roots:
                await self._add_tree(tx, root, None, out)
            return out

        return await self._transact(add)

    async def _add_tree(
        self, tx: Tx, node: FlowNode, parent: tuple[str, str] | None, out: list[JobRecord]
    ) -> None:
        qkey = self._key(node.queue)
        new = node.job
        if parent is not None:
            link = {"id": parent[1], "queue": parent[0]}
            new = NewJob(new.name, new.data, {**new.opts, "parent": link}, new.timestamp)
        [record] = await t.add_jobs(tx, qkey, [new], hold=bool(node.children))
        out.append(record)
        for child in node.children:
            await self._add_tree(tx, child, (qkey, record.id), out)

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> dict[str, Any] | None:
        qkey = self._key(queue)
        return await self._transact(lambda tx: _tree(tx, qkey, job_id, depth, max_children))

    async def move_to_waiting_children(self, queue: str, job_id: str, token: str) -> bool:
        qkey = self._key(queue)
        return await self._transact(lambda tx: t.move_to_waiting_children(tx, qkey, job_id, token))

    async def get_dependencies(self, queue: str, job_id: str) -> dict[str, Any]:
        links = await self._read("flows.links", self._key(queue), job_id)
        return {
            "processed": {r["child_key"]: r["value"] for r in links if r["status"] == "processed"},
            "unprocessed": sorted(r["child_key"] for r in links if r["status"] == "pending"),
            "failed": _failed_links(links),
            "ignored": {r["child_key"]: r["value"] for r in links if r["status"] == "ignored"},
        }

    async def get_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        return (await self.get_dependencies(queue, job_id))["processed"]  # type: ignore[no-any-return]

    async def get_failed_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        return _failed_links(await self._read("flows.links", self._key(queue), job_id))

    # ------------------------------------------------------------------ events
    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        qkey = self._key(queue)
        key = "e:" + qkey
        await self.notifier.listen_for(key)
        future = self.notifier.register(key)
        try:
            newest = await self._sequence(qkey)
            after = parse_event_id(last_id, newest)
            found = await self._events_after(qkey, after, count, sequence=False)
            if found or block_ms <= 0:
                return found
            await self.notifier.wait(future, block_ms)
        finally:
            self.notifier.discard(key, future)
        return await self._events_after(qkey, after, count)

    async def newest_event_id(self, queue: str) -> str:
        newest = await self._sequence(self._key(queue))
        return f"0-{newest}" if newest else "0"

    async def _events_after(
        self, qkey: str, after: int, count: int, sequence: bool = True
    ) -> list[tuple[str, str, dict[str, Any]]]:
        if sequence:
            await self._sequence(qkey)
        rows = await self._read("events.read", qkey, after, count)
        return [_event(row) for row in rows]

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        await self._read("events.set_max_len", self._key(queue), queue, max_len)

    # ------------------------------------------------------------------ schedulers
    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        qkey = self._key(queue)
        spec = dict(repeat)
        return await self._transact(
            lambda tx: t.upsert_scheduler(tx, qkey, scheduler_id, spec, template)
        )

    async def get_job_scheduler(self, queue: str, scheduler_id: str) -> dict[str, Any] | None:
        rows = await self._read("schedulers.get", self._key(queue), scheduler_id)
        return _describe(rows[0]) if rows else None

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[dict[str, Any]]:
        rows = [_describe(row) for row in await self._read("schedulers.all", self._key(queue))]
        rows = rows if asc else rows[::-1]
        stop = None if end == -1 else end + 1
        return rows[start:stop]

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        qkey = self._key(queue)

        async def remove(tx: Tx) -> bool:
            row = await tx.fetchrow("schedulers.delete", qkey, scheduler_id)
            if row is None:
                return False
            if row["pending"]:
                await t.drop_pending(tx, qkey, row["pending"])
            return True

        return await self._transact(remove)

    # ------------------------------------------------------------------ rate limits
    async def rate_limit(self, queue: str, delay_ms: int) -> None:
        await self._read("rate_limit", self._key(queue), queue, delay_ms)

    async def get_rate_limit_ttl(self, queue: str, max_jobs: int | None) -> int:
        return int(await self._value("get_rate_limit_ttl", self._key(queue)))

    async def set_global_rate_limit(self, queue: str, limiter: Limiter | None) -> None:
        most = None if limiter is None else limiter.max
        duration = None if limiter is None else limiter.duration
        await self._wake_after("set_global_rate_limit", queue, most, duration)

    async def set_global_concurrency(self, queue: str, concurrency: int | None) -> None:
        await self._wake_after("set_global_concurrency", queue, concurrency)

    async def _wake_after(self, name: str, queue: str, *args: Any) -> None:
        qkey = self._key(queue)

        async def run(tx: Tx) -> None:
            await tx.execute(name, qkey, queue, *args)
            tx.wake(qkey)

        await self._transact(run)

    # ------------------------------------------------------------------ deduplication
    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        value = await self._value("get_deduplication_job_id", self._key(queue), dedup_id)
        return None if value is None else str(value)

    async def remove_deduplication_key(
        self, queue: str, dedup_id: str, job_id: str | None = None
    ) -> bool:
        return bool(
            await self._read("remove_deduplication_key", self._key(queue), dedup_id, job_id)
        )

    # ------------------------------------------------------------------ metrics and workers
    async def get_metrics(self, queue: str, kind: str, start: int, end: int) -> dict[str, Any]:
        rows = await self._read("get_metrics", self._key(queue), kind)
        return _metrics(rows, start, end)

    async def get_counts_per_priority(
        self, queue: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        rows = await self._read("get_jobs.counts_per_priority", self._key(queue), list(priorities))
        return {str(row["priority"]): int(row["n"]) for row in rows}

    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        """List the worker until it unregisters; this backend renews its entry every third
        of `worker_ttl`, so the entry of a worker whose process died expires."""
        qkey, text = self._key(queue), json_text(dict(info))
        await self._read("register_worker.register", qkey, worker_name, text, self._ttl_ms)
        self._workers[(qkey, worker_name)] = text
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._beat())

    async def unregister_worker(self, queue: str, worker_name: str) -> None:
        async with self._registry_writes:
            self._workers.pop((self._key(queue), worker_name), None)
            await self._read("unregister_worker", self._key(queue), worker_name)

    @property
    def _ttl_ms(self) -> int:
        return self.settings.worker_ttl * 1000

    async def _beat(self) -> None:
        """Renew the entries of the workers registered here while there are any. A renewal
        that fails is logged and tried again at the next beat (an entry may expire during a
        long outage; the next renewal writes it again)."""
        while self._workers:
            await asyncio.sleep(self.settings.worker_ttl / 3)
            try:
                async with self._registry_writes:
                    await self._renew_workers()
            except PsyqError as exc:
                log.warning("psyq: renewing the worker registry failed: %s", exc)

    async def _renew_workers(self) -> None:
        keys = list(self._workers)
        texts = [self._workers[key] for key in keys]
        qkeys, names = [key[0] for key in keys], [key[1] for key in keys]
        await self._read("register_worker.heartbeat", qkeys, names, texts, self._ttl_ms)

    async def _stop_heartbeat(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def get_workers(self, queue: str) -> list[dict[str, Any]]:
        rows = await self._read("get_workers", self._key(queue))
        return [{"name": r["name"], "started": r["started"], **json.loads(r["info"])} for r in rows]

    # ------------------------------------------------------------------ cancellation
    async def cancel_job(self, queue: str, job_id: str, reason: str) -> bool:
        return bool(await self._read("cancel_job", self._key(queue), job_id, reason))

    async def get_cancelled(self, queue: str, job_ids: Sequence[str]) -> dict[str, str]:
        rows = await self._read("get_cancelled", self._key(queue), list(job_ids))
        return {row["id"]: row["cancel_reason"] for row in rows}

    # ------------------------------------------------------------------ export / import
    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        if limit < 1:
            raise InvalidOptionsError(f"export limit must be >= 1, got {limit!r}", option="limit")
        qkey = self._key(queue)
        return await self._transact(lambda tx: export.export_page(tx, qkey, cursor, limit))

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        return await export.import_jobs(self._transact, self._key(queue), page, overwrite)

    async def get_queue_meta(self, queue: str) -> dict[str, Any]:
        qkey = self._key(queue)
        return await self._transact(lambda tx: export.queue_meta(tx, qkey))

    async def set_queue_meta(self, queue: str, meta: Mapping[str, Any]) -> None:
        qkey = self._key(queue)
        await self._transact(lambda tx: export.set_queue_meta(tx, qkey, dict(meta)))


# ---------------------------------------------------------------------- helpers
def _split_fetch(
    fetch: FetchRequest | None, first: int
) -> tuple[FetchRequest | None, FetchRequest | None]:
    """`fetch` as two requests: its first `first` tokens, and the rest (None: no tokens)."""
    if fetch is None:
        return None, None
    parts = (fetch.tokens[:first], fetch.tokens[first:])
    split = [dataclasses.replace(fetch, tokens=part) if part else None for part in parts]
    return split[0], split[1]


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A connection goes back to the pool as it is: psyq's statements never change session
    state (no SET, LISTEN or advisory lock on pool connections; transactions end before
    release), so asyncpg's reset query would be one more round trip per call for nothing.
    asyncpg still rolls back a transaction left open before it calls this."""


async def _savepoint(tx: Tx, step: Awaitable[None]) -> PsyqError | None:
    """Run `step` in a savepoint; its PsyqError undoes only the step and is returned."""
    mark = tx.mark()
    try:
        async with tx.conn.transaction():
            await step
    except PsyqError as exc:
        tx.drop_effects(mark)
        return exc
    return None


async def _promote(tx: Tx, qkey: str, job_id: str) -> None:
    row = await t.job_in_state(tx, qkey, job_id, ["delayed"], "promote")
    await t.enqueue(tx, qkey, job_id, t.is_lifo(row), "delayed")


async def _reprocess(tx: Tx, qkey: str, job_id: str, state: str) -> None:
    row = await t.job_in_state(tx, qkey, job_id, [state], "retry")
    await tx.execute("reprocess_job", qkey, job_id)
    await t.enqueue(tx, qkey, job_id, t.is_lifo(row), state)


async def _page(tx: Tx, qkey: str, state: str, start: int, end: int, asc: bool) -> list[JobRecord]:
    """One state's jobs [start, end] (end inclusive, -1 = last), sliced by the database."""
    limit = None if end == -1 else max(0, end - start + 1)
    name = "get_jobs.page_asc" if asc else "get_jobs.page_desc"
    return [to_record(row) for row in await tx.fetch(name, qkey, state, start, limit)]


async def _ids_in(tx: Tx, qkey: str, state: str, paused: bool, asc: bool) -> list[str]:
    if state in ("waiting", "paused"):
        if paused != (state == "paused"):
            return []
        state = "waiting"
    ids = [row["id"] for row in await tx.fetch("get_jobs.ids_in_state", qkey, state)]
    return ids if asc else ids[::-1]


def _count(found: Mapping[str, int], state: str, paused: bool) -> int:
    if state in ("waiting", "paused"):
        return found.get("waiting", 0) if paused == (state == "paused") else 0
    return found.get(state, 0)


def _failed_links(links: Sequence[asyncpg.Record]) -> dict[str, str]:
    return {
        r["child_key"]: r["value"]
        for r in links
        if r["status"] == "failed" or (r["status"] == "pending" and r["value"] is not None)
    }


async def _tree(
    tx: Tx, qkey: str, job_id: str, depth: int, max_children: int
) -> dict[str, Any] | None:
    row = await tx.fetchrow("common.get_job", qkey, job_id)
    if row is None:
        return None
    children: list[dict[str, Any]] = []
    if depth != 1:
        links = await tx.fetch("flows.links", qkey, job_id)
        for link in links[: max_children or None]:
            cq, cid = t.split_key(link["child_key"])
            node = await _tree(tx, cq, cid, max(0, depth - 1), max_children)
            if node is not None:
                children.append(node)
    return {"job": to_record(row), "children": children}


def _event(row: asyncpg.Record) -> tuple[str, str, dict[str, Any]]:
    fields: dict[str, Any] = {} if row["job_id"] is None else {"jobId": row["job_id"]}
    fields.update(json.loads(row["fields"]))
    return f"{row['ms']}-{row['seq']}", row["event"], fields


def _describe(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "key": row["id"],
        "name": row["template_name"],
        **json.loads(row["spec"]),
        "iterationCount": row["iteration_count"],
        "next": row["next_ms"],
        "template": {"data": row["template_data"], "opts": json.loads(row["template_opts"])},
    }


def _metrics(rows: Sequence[asyncpg.Record], start: int, end: int) -> dict[str, Any]:
    if not rows:
        return {"meta": {"count": 0}, "data": [], "count": 0}
    by_minute = {row["minute"]: row["count"] for row in rows}
    newest, oldest = rows[0]["minute"], rows[-1]["minute"]
    now_minute = rows[0]["now_minute"]
    first = max(oldest, now_minute - MAX_DATA_POINTS + 1)
    data = [by_minute.get(m, 0) for m in range(max(now_minute, newest), first - 1, -1)]
    stop = None if end == -1 else end + 1
    total = sum(row["count"] for row in rows)
    return {"meta": {"count": total}, "data": data[start:stop], "count": len(data)}
