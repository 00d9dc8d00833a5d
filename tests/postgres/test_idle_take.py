"""A take that finds no other job waiting leaves an idle mark (a job notification's future
registered before the take): the next take and wait_for_job trust it instead of asking the
server, until a job is announced or the next delayed job is due. These tests check that
nothing waits past what it should: an added job, a delayed job coming due, a job that was
locked when the take skipped it, a job this process put back in line."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from psyq.backends.base import Completed, FetchRequest, NewJob, Retry, Settlement
from psyq.backends.postgres import PostgresBackend
from psyq.backends.postgres.listen import JOBS_CHANNEL

from .conftest import url_for

DRAIN_MS = 30_000  # far beyond any wait below: a wait that runs to it fails the test


def request(n: int = 1) -> FetchRequest:
    return FetchRequest([uuid.uuid4().hex for _ in range(n)], 30_000, "w", None)


def done() -> Completed:
    return Completed("1", None)


async def opened(server: str, schema: str) -> PostgresBackend:
    backend = PostgresBackend(url_for(server, schema))
    await backend.open()
    return backend


async def test_an_added_job_ends_the_idle_wait(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = await opened(pg_server, fresh_schema())
    try:
        await backend.add_jobs("q", [NewJob("x", "{}", {})])
        assert len(await backend.move_to_active("q", request(5))) == 1
        assert await backend.move_to_active("q", request(5)) == []  # the idle mark
        waiting = asyncio.ensure_future(backend.wait_for_job("q", DRAIN_MS))
        await asyncio.sleep(0.05)  # sleep: a while in which the idle wait must go on
        assert not waiting.done()
        await backend.add_jobs("q", [NewJob("y", "{}", {})])
        await asyncio.wait_for(waiting, 10)
        assert [job.name for job in await backend.move_to_active("q", request(5))] == ["y"]
    finally:
        await backend.close()


async def test_a_delayed_job_ends_the_idle_wait_when_due(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = await opened(pg_server, fresh_schema())
    try:
        await backend.add_jobs(
            "q", [NewJob("now", "{}", {}), NewJob("later", "{}", {"delay": 300})]
        )
        assert [job.name for job in await backend.move_to_active("q", request(5))] == ["now"]
        await asyncio.wait_for(backend.wait_for_job("q", DRAIN_MS), 10)
        for _ in range(100):
            taken = await backend.move_to_active("q", request(5))
            if taken:
                break
            await asyncio.wait_for(backend.wait_for_job("q", DRAIN_MS), 10)
        assert [job.name for job in taken] == ["later"]
    finally:
        await backend.close()


async def test_no_idle_mark_while_a_waiting_job_is_locked(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """A job skipped because another transaction held its row is still waiting: the take
    must not say the queue is idle (no notification will come for it)."""
    schema = fresh_schema()
    backend = await opened(pg_server, schema)
    try:
        await backend.add_jobs("q", [NewJob("held", "{}", {})])
        async with backend.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT 1 FROM job WHERE queue = 'q' FOR UPDATE")
            assert await backend.move_to_active("q", request(5)) == []
        await asyncio.wait_for(backend.wait_for_job("q", DRAIN_MS), 10)
        assert [job.name for job in await backend.move_to_active("q", request(5))] == ["held"]
    finally:
        await backend.close()


async def test_a_job_this_process_adds_is_taken_without_waiting_for_its_notification(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    # the add's reply and its notification come back on two connections: the next take
    # must not trust the idle mark the empty take left (a manual `get_next_job(block=False)`
    # right after `queue.add`), whichever comes first
    backend = await opened(pg_server, fresh_schema())
    try:
        missed = 0
        for n in range(50):
            assert await backend.move_to_active("q", request(1)) == []  # leaves the mark
            await backend.add_jobs("q", [NewJob(f"j{n}", "{}", {})])
            taken = await backend.move_to_active("q", request(1))
            missed += not taken
            for job in taken or await backend.move_to_active("q", request(1)):
                await backend.move_to_finished("q", job.id, job.lock_token or "", done())
        assert missed == 0
    finally:
        await backend.close()


async def test_a_job_this_process_puts_back_in_line_is_taken_without_its_notification(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    # the take that got the job found no other one waiting and left the mark; a retry (or
    # any move of this process back to waiting) must not leave the next take trusting it
    # until the retry's notification comes back. The notifications are kept from the
    # listener here, so the next take sees the job only by asking the server.
    backend = await opened(pg_server, fresh_schema())
    try:
        listener = backend.listener
        assert listener._conn is not None
        await listener._conn.remove_listener(JOBS_CHANNEL, listener._on_notify)
        for n in range(3):
            await backend.add_jobs("q", [NewJob(f"j{n}", "{}", {"attempts": 2})])
            [job] = await backend.move_to_active("q", request(1))
            retry = Settlement(job.id, job.lock_token or "", Retry("first"))
            assert await backend.settle_many("q", [retry]) == ([None], [])
            [again] = await backend.move_to_active("q", request(1))
            assert again.id == job.id
            await backend.move_to_finished("q", again.id, again.lock_token or "", done())
    finally:
        await backend.close()
