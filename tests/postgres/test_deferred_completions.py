"""A completion while the worker's queue has no other job waiting waits (at most
`settle_linger_ms`) to ride on the next call that goes to the server, the take the next
job's arrival starts; its slot is free meanwhile. These tests check the promises around
it: the completion rides on that take (it is not held for the whole linger), it is settled
alone when no job comes, `completed` is emitted only once the store has it, and close and
pause settle what waits at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import asyncpg
import pytest

import psyq
from tests.conftest import fresh_name
from tests.polling import eventually

from .conftest import url_for

LONG_MS = 4_000  # a linger no step below may wait out


async def state_of(server: str, schema: str, queue: str, job_id: str) -> str:
    conn = await asyncpg.connect(server, server_settings={"search_path": schema})
    try:
        query = "SELECT state::text FROM job WHERE queue = $1 AND id = $2"
        return str(await conn.fetchval(query, queue, job_id))
    finally:
        await conn.close()


class Seen:
    """When each job started and completed, and the job's state in the store as its
    `completed` event was emitted (read on a connection of the test's own)."""

    def __init__(self, worker: psyq.Worker, server: str, schema: str) -> None:
        self.started: dict[str, float] = {}
        self.completed: dict[str, float] = {}
        self.stored: dict[str, asyncio.Task[str]] = {}
        self.errors: list[BaseException] = []
        worker.on("active", lambda job, prev: self.started.setdefault(job.id, time.monotonic()))
        worker.on("error", self.errors.append)

        def on_completed(job: psyq.Job, result: object) -> None:
            self.completed[job.id] = time.monotonic()
            check = state_of(server, schema, job.queue_name, job.id)
            self.stored[job.id] = asyncio.ensure_future(check)

        worker.on("completed", on_completed)

    async def until(self, job_id: str, seconds: float = 10) -> float:
        """When the job completed, once it has."""
        await eventually(lambda: job_id in self.completed, f"job {job_id} completed", seconds)
        return self.completed[job_id]


async def noop(job: psyq.Job) -> int:
    return 1


async def idle_after_one_job(queue: psyq.Queue, worker: psyq.Worker, seen: Seen) -> None:
    """Put one job through and let the worker reach its wait for the next, so the next
    job's take is the first after the queue ran dry (a worker's very first take may come
    after the add it should have waited for). That job's completion is settled at once, or
    waits to ride on the next job's take."""
    await worker.wait_until_ready()
    warm = await queue.add("warm", {})
    await ran(warm.id, seen, worker)


async def ran(job_id: str, seen: Seen, worker: psyq.Worker) -> None:
    """Until the job's processor has returned (its completion settled, or deferred: waiting
    in the worker to ride on a call) and the worker's fetcher, its slot free again, waits
    for the next job."""

    def done_and_waiting() -> bool:
        finished = job_id in seen.completed or worker._settler.deferred(job_id)
        return finished and worker._takes.drained

    await eventually(done_and_waiting, f"job {job_id} run, the worker waiting for the next")


@pytest.mark.timeout(60)
async def test_a_completion_rides_on_the_take_of_the_next_job(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema, name = fresh_schema(), fresh_name("ride")
    url = url_for(pg_server, schema, settle_linger_ms=str(LONG_MS))
    async with psyq.Queue(name, connection=url) as queue:
        worker = psyq.Worker(name, noop, connection=url, concurrency=1)
        seen = Seen(worker, pg_server, schema)
        try:
            await idle_after_one_job(queue, worker, seen)
            first = await queue.add("a", {})
            await ran(first.id, seen, worker)  # its completion waits
            assert first.id not in seen.completed
            assert await state_of(pg_server, schema, name, first.id) == "active"
            added = time.monotonic()
            second = await queue.add("b", {})
            done_first = await seen.until(first.id, LONG_MS / 2000)
            await seen.until(second.id)
            # the one slot took the second job while the first's completion waited, and
            # the first was settled by that take, long before its linger ran out
            assert seen.started[second.id] < done_first + 0.5
            assert done_first - added < LONG_MS / 2000
            assert await seen.stored[first.id] == "completed"
        finally:
            await worker.close()
        assert seen.errors == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("linger_ms", "after"), [(300, (0.25, 5)), (0, (0, 1))])
async def test_a_lone_completion_is_settled_when_the_linger_runs_out(
    pg_server: str, fresh_schema: Callable[[], str], linger_ms: int, after: tuple[float, float]
) -> None:
    schema, name = fresh_schema(), fresh_name("lone")
    url = url_for(pg_server, schema, settle_linger_ms=str(linger_ms))
    async with psyq.Queue(name, connection=url) as queue:
        worker = psyq.Worker(name, noop, connection=url, concurrency=2)
        seen = Seen(worker, pg_server, schema)
        try:
            await worker.wait_until_ready()
            job = await queue.add("a", {})
            done = await seen.until(job.id)
            low, high = after  # the linger, then alone; without one, at once
            assert low <= done - seen.started[job.id] < high
            assert await seen.stored[job.id] == "completed"
        finally:
            await worker.close()
        assert seen.errors == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("force", [False, True])
async def test_close_settles_a_waiting_completion_at_once(
    pg_server: str, fresh_schema: Callable[[], str], force: bool
) -> None:
    schema, name = fresh_schema(), fresh_name("close")
    url = url_for(pg_server, schema, settle_linger_ms=str(LONG_MS * 10))
    async with psyq.Queue(name, connection=url) as queue:
        worker = psyq.Worker(name, noop, connection=url, concurrency=1)
        seen = Seen(worker, pg_server, schema)
        await idle_after_one_job(queue, worker, seen)
        job = await queue.add("a", {})
        await ran(job.id, seen, worker)
        assert job.id not in seen.completed
        started = time.monotonic()
        await worker.close(force=force)
        assert time.monotonic() - started < LONG_MS / 1000
        assert job.id in seen.completed  # not handed back: its processor had returned
        assert await seen.stored[job.id] == "completed"
        assert await queue.get_job_state(job.id) == "completed"
        assert seen.errors == []


@pytest.mark.timeout(60)
async def test_pause_settles_a_waiting_completion_at_once(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema, name = fresh_schema(), fresh_name("pause")
    url = url_for(pg_server, schema, settle_linger_ms=str(LONG_MS * 10))
    async with psyq.Queue(name, connection=url) as queue:
        worker = psyq.Worker(name, noop, connection=url, concurrency=1)
        seen = Seen(worker, pg_server, schema)
        try:
            await idle_after_one_job(queue, worker, seen)
            job = await queue.add("a", {})
            await ran(job.id, seen, worker)
            assert job.id not in seen.completed
            await asyncio.wait_for(worker.pause(), LONG_MS / 1000)
            assert job.id in seen.completed
            assert await queue.get_job_state(job.id) == "completed"
        finally:
            await worker.close()
        assert seen.errors == []
