"""A queue's event policy (issue 52): under `when-read` psyq's add and settle-with-take write
no event rows while no reader holds a lease, every event while one does; the policy is
stored with the queue (by URL or by Queue(events=...)) and unknown values are refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

import psyq
from psyq.backends.base import NewJob
from psyq.backends.postgres import PostgresBackend
from psyq.errors import InvalidOptionsError, InvalidURLError
from tests.polling import eventually

from .conftest import url_for


@pytest.fixture
async def schema(fresh_schema: Callable[[], str]) -> str:
    return fresh_schema()


@pytest.fixture
async def quiet_url(pg_server: str, schema: str) -> str:
    return url_for(pg_server, schema, events="when-read")


async def event_rows(admin: asyncpg.Connection, schema: str, queue: str) -> list[str]:
    rows = await admin.fetch(
        f'SELECT event FROM "{schema}".event WHERE queue = $1 ORDER BY id', queue
    )
    return [row["event"] for row in rows]


async def policy(admin: asyncpg.Connection, schema: str, queue: str) -> str | None:
    value: str | None = await admin.fetchval(
        f"SELECT value FROM \"{schema}\".meta WHERE queue = $1 AND field = 'psyq.events'", queue
    )
    return value


@pytest.fixture
async def backend(quiet_url: str) -> AsyncIterator[PostgresBackend]:
    opened = PostgresBackend(quiet_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def test_an_unknown_policy_is_refused_naming_it(pg_server: str) -> None:
    with pytest.raises(InvalidURLError, match="'sometimes'"):
        PostgresBackend(url_for(pg_server, "s", events="sometimes"))
    with pytest.raises(InvalidOptionsError, match="'never'"):
        psyq.Queue("q", "memory://", events="never")


async def test_without_a_reader_plain_adds_and_takes_write_no_event_rows(
    backend: PostgresBackend, admin: asyncpg.Connection, schema: str
) -> None:
    await backend.add_jobs("q", [NewJob("first", "{}", {})])  # the layout creates the queue
    before = await event_rows(admin, schema, "q")
    await backend.add_jobs("q", [NewJob("x", "{}", {}) for _ in range(5)])
    await backend.add_jobs("q", [NewJob("one", "{}", {})])
    assert await policy(admin, schema, "q") == "when-read"
    assert await event_rows(admin, schema, "q") == before

    async def done(job: psyq.Job) -> str:
        return job.name

    async def completed() -> bool:
        counts = await backend.get_job_counts("q", ["completed"])
        return counts["completed"] == 7

    worker = psyq.Worker("q", done, backend.url)
    try:
        await eventually(completed, timeout=10)
    finally:
        await worker.close()
    assert await event_rows(admin, schema, "q") == before


async def test_a_reader_sees_every_event_from_its_start_on(
    quiet_url: str, admin: asyncpg.Connection, schema: str
) -> None:
    queue = psyq.Queue("q", quiet_url)
    await queue.add("first", {})
    async with psyq.QueueEvents("q", quiet_url) as events:
        seen: list[str] = []
        events.on("added", lambda args, event_id: seen.append(args["jobId"]))
        await events.wait_until_ready(timeout=10)
        jobs = [await queue.add("x", {}) for _ in range(3)]
        jobs += await queue.add_bulk([{"name": "y", "data": {}} for _ in range(3)])
        await eventually(lambda: len(seen) == 6, timeout=10)
        assert seen == [job.id for job in jobs]
    await queue.close()


async def test_the_policy_set_by_the_api_is_seen_by_another_client(
    pg_server: str, schema: str, admin: asyncpg.Connection
) -> None:
    plain = url_for(pg_server, schema)
    async with psyq.Queue("q", plain, events="when-read") as queue:
        await queue.add("first", {})
        assert await policy(admin, schema, "q") == "when-read"
        before = await event_rows(admin, schema, "q")
        async with psyq.Queue("q", plain) as other:  # no events=: the stored policy holds
            await other.add("x", {})
        assert await event_rows(admin, schema, "q") == before
    async with psyq.Queue("q", plain, events="always") as queue:
        await queue.add("y", {})
    assert await policy(admin, schema, "q") is None
    assert (await event_rows(admin, schema, "q"))[-2:] == ["added", "waiting"]


async def test_a_reader_that_stops_ends_its_lease(
    backend: PostgresBackend, admin: asyncpg.Connection, schema: str
) -> None:
    await backend.newest_event_id("q")
    lease = f'SELECT count(*) FROM "{schema}".psyq_event_reader WHERE queue = $1'
    assert await admin.fetchval(lease, "q") == 1
    await backend.close()
    assert await admin.fetchval(lease, "q") == 0


async def test_the_other_stores_accept_either_policy_and_write_every_event() -> None:
    async with psyq.Queue("q", "memory://", events="when-read") as queue:
        job = await queue.add("x", {})
        backend = await queue._open()
        events = await backend.read_events("q", "0", 10, 0)
    assert [event for _, event, fields in events if fields.get("jobId") == job.id][:1] == ["added"]


async def test_a_reader_from_a_given_id_holds_its_lease_once_ready(
    quiet_url: str, admin: asyncpg.Connection, schema: str
) -> None:
    async with psyq.Queue("q", quiet_url) as queue:
        await queue.add("first", {})
        quiet = await event_rows(admin, schema, "q")
        await queue.add("unread", {})  # nobody reads: no rows
        assert await event_rows(admin, schema, "q") == quiet
        async with psyq.QueueEvents("q", quiet_url, last_event_id="0") as events:
            seen: list[str] = []
            events.on("added", lambda args, event_id: seen.append(args["jobId"]))
            await events.wait_until_ready(timeout=10)
            job = await queue.add("read", {})
            await eventually(lambda: job.id in seen, timeout=10)
