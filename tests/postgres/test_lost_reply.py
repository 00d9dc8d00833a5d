"""A settle whose statement committed but whose reply was lost with its connection (the
session killed just after the commit) is sent again by the backend. The retry must see
that its own earlier attempt settled the job: the worker emits `completed`, not `error`,
and the job that attempt fetched for the slot (fetch-next) runs at once instead of staying
active until its lock expires."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

import psyq
from psyq.backends.postgres import PostgresBackend
from tests.conftest import fresh_name
from tests.worker_run import run_each_job

from .conftest import url_for

LONG_LOCK_MS = 60_000  # a job left active would not come back within the test


class LoseReply:
    """Wraps the backend's calls: once armed, the first call after which `settled` holds
    has its session killed (pg_terminate_backend) after it committed, and fails as the
    kill makes it fail, so the backend sends it again."""

    def __init__(
        self,
        backend: PostgresBackend,
        admin: asyncpg.Connection,
        settled: Callable[[asyncpg.Connection], Awaitable[bool]],
    ) -> None:
        self.armed = False
        self.fired = 0
        original = backend._on_connection
        checking = asyncio.Lock()  # one call at a time looks: two that ended together both lost

        async def on_connection(run: Any, *args: Any, **kwargs: Any) -> Any:
            async def run_then_lose(conn: asyncpg.Connection) -> Any:
                result = await run(conn)
                async with checking:
                    lose = self.armed and await settled(conn)
                    if lose:
                        self.armed = False
                        self.fired += 1
                if lose:
                    await admin.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
                    await conn.fetchval("SELECT 1")  # raises: the session is gone
                return result

            return await original(run_then_lose, *args, **kwargs)

        backend._on_connection = on_connection  # type: ignore[method-assign]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("concurrency", [1, 3])
async def test_a_settle_whose_reply_was_lost_reports_completed(
    pg_server: str,
    fresh_schema: Callable[[], str],
    admin: asyncpg.Connection,
    concurrency: int,
) -> None:
    url = url_for(pg_server, fresh_schema(), pool_min="1", pool_max="2")
    name = fresh_name("lost-reply")
    backend = PostgresBackend(url)
    await backend.open()
    runs: Counter[str] = Counter()
    try:
        async with psyq.Queue(name, connection=backend) as queue:
            jobs = await queue.add_bulk([{"name": "x", "data": {"n": n}} for n in range(8)])
            first = jobs[0].id

            async def first_completed(conn: asyncpg.Connection) -> bool:
                query = "SELECT state::text FROM job WHERE queue = $1 AND id = $2"
                return bool(await conn.fetchval(query, name, first) == "completed")

            lose = LoseReply(backend, admin, first_completed)

            async def process(job: psyq.Job) -> int:
                runs[job.id] += 1
                if job.id == first:
                    lose.armed = True
                return int(job.data["n"])

            ran = await run_each_job(queue, backend, process, jobs, concurrency, LONG_LOCK_MS)
            completed, errors, states, started = ran.completed, ran.errors, ran.states, ran.started
    finally:
        await backend.close()
    assert lose.fired == 1  # the fault happened
    assert errors == []
    assert sorted(completed) == sorted(job.id for job in jobs)  # each once, `completed`
    assert set(states.values()) == {"completed"}
    assert set(runs.values()) == {1} and set(started.values()) == {1}  # none taken twice


class LoseFirst:
    """Wraps the backend's calls: once armed, the next call's session is killed before it
    runs its statement (nothing committed), and the backend sends it again."""

    def __init__(self, backend: PostgresBackend, admin: asyncpg.Connection) -> None:
        self.armed = False
        self.fired = 0
        original = backend._on_connection

        async def on_connection(run: Any, *args: Any, **kwargs: Any) -> Any:
            async def lose_then_run(conn: asyncpg.Connection) -> Any:
                if self.armed:
                    self.armed = False
                    self.fired += 1
                    await admin.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
                    await conn.fetchval("SELECT 1")  # raises: the session is gone
                return await run(conn)

            return await original(lose_then_run, *args, **kwargs)

        backend._on_connection = on_connection  # type: ignore[method-assign]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("lost", ["reply", "call"])
@pytest.mark.parametrize("plain", [True, False])
async def test_move_to_completed_with_fetch_next_after_a_loss(
    pg_server: str,
    fresh_schema: Callable[[], str],
    admin: asyncpg.Connection,
    lost: str,
    plain: bool,
) -> None:
    """`Job.move_to_completed(fetch_next=True)` with the caller's own token (as BullMQ's
    manual processing does), its session lost after the commit (`reply`: the job completed
    and the next one taken, the reply lost) or before its statement ran (`call`): either
    way the job is completed once and the call returns the next job, taken once; never the
    job it completed. A job with a deduplication id (not `plain`) is settled through the
    layout's move_to_completed (complete_take), a plain one through psyq's statement."""
    url = url_for(pg_server, fresh_schema(), pool_min="1", pool_max="2")
    name = fresh_name("lost-reply")
    backend = PostgresBackend(url)
    await backend.open()
    token = "my-token"
    try:
        async with psyq.Queue(name, connection=backend) as queue:
            first = await queue.add(
                "x", {"n": 0}, **({} if plain else {"deduplication": {"id": "d-" + name}})
            )
            second = await queue.add("x", {"n": 1})
            worker = psyq.Worker(name, connection=backend, lock_duration=LONG_LOCK_MS)
            try:
                job = await worker.get_next_job(token, block=False)
                assert job is not None and job.id == first.id

                async def first_completed(conn: asyncpg.Connection) -> bool:
                    query = "SELECT state::text FROM job WHERE queue = $1 AND id = $2"
                    return bool(await conn.fetchval(query, name, first.id) == "completed")

                lose: LoseReply | LoseFirst
                lose = LoseReply(backend, admin, first_completed) if lost == "reply" else None  # type: ignore[assignment]
                if lose is None:
                    lose = LoseFirst(backend, admin)
                lose.armed = True
                nxt = await job.move_to_completed(5, token, fetch_next=True)
                assert lose.fired == 1  # the fault happened
            finally:
                await worker.close()
            assert nxt is not None and nxt.id == second.id
            assert await queue.get_job_state(first.id) == "completed"
            assert await queue.get_job_state(second.id) == "active"
            done, taken = await queue.get_job(first.id), await queue.get_job(second.id)
            assert done is not None and done.attempts_made == 1 and done.returnvalue == 5
            assert taken is not None and taken.attempts_started == 1
    finally:
        await backend.close()
