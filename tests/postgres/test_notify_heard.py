"""Transitions NOTIFY a key only while a backend listens for it (migration 0008): a commit
that notifies holds a database-wide lock through its WAL flush, so unheard notifications
would serialise every commit. Workers and event readers announce their keys before waiting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

import psyq
from psyq.backends.base import NewJob
from psyq.backends.postgres import PostgresBackend
from psyq.backends.postgres.config import parse_postgres_url
from tests.conftest import fresh_name

from .conftest import url_for


class Heard:
    """A plain LISTEN on the schema's channel that records every payload."""

    def __init__(self) -> None:
        self.payloads: list[str] = []

    def __call__(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self.payloads.append(payload)

    async def until(self, match: Callable[[str], bool]) -> None:
        """Until a payload that `match`es arrives (its delivery races the job's own)."""
        for _ in range(400):
            if any(match(payload) for payload in self.payloads):
                return
            await asyncio.sleep(0.025)
        raise AssertionError(f"no matching notification among {self.payloads!r}")


@pytest.fixture
async def setup(
    pg_server: str, fresh_schema: Callable[[], str]
) -> AsyncIterator[tuple[str, Heard, asyncpg.Connection]]:
    url = url_for(pg_server, fresh_schema())
    async with psyq.Queue(fresh_name("warmup"), connection=url):
        pass  # creates the schema
    heard = Heard()
    conn = await asyncpg.connect(pg_server)
    await conn.add_listener(parse_postgres_url(url).channel, heard)
    try:
        yield url, heard, conn
    finally:
        await conn.close()


async def _until_announced(conn: asyncpg.Connection, url: str, kind: str, name: str) -> None:
    """Until a backend listens for the queue's key (`kind` "j": a worker, "e": an event
    reader): from then on a commit that touches the queue NOTIFYs it."""
    schema = parse_postgres_url(url).schema
    query = f"SELECT count(*) FROM {schema}.listeners WHERE key LIKE $1"
    for _ in range(400):
        if await conn.fetchval(query, f"{kind}:%{name}"):
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"nobody announced the key {kind}:...{name}")


async def test_adds_notify_nobody_until_a_worker_waits(
    setup: tuple[str, Heard, asyncpg.Connection],
) -> None:
    url, heard, conn = setup
    name = fresh_name("heard")
    done = asyncio.Event()
    async with psyq.Queue(name, connection=url) as queue:
        await queue.add("before", {})
        await asyncio.sleep(0.3)  # a notification would have arrived by now
        assert heard.payloads == [], "notified with no listener"

        async def process(job: psyq.Job) -> None:
            if job.name == "after":
                done.set()

        worker = psyq.Worker(name, process, connection=url, autorun=False)
        run = asyncio.create_task(worker.run())
        try:
            await _until_idle(queue)
            await _until_announced(conn, url, "j", name)
            heard.payloads.clear()
            await queue.add("after", {})
            await asyncio.wait_for(done.wait(), 10)
            await heard.until(lambda p: p.startswith("j:") and p.endswith(name))
        finally:
            await worker.close()
            await run


async def test_a_queue_events_reader_is_notified_of_events(
    setup: tuple[str, Heard, asyncpg.Connection],
) -> None:
    url, heard, conn = setup
    name = fresh_name("heard-events")
    added: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_added(payload: dict[str, str], event_id: str) -> None:
        if not added.done():
            added.set_result(payload["jobId"])

    async with (
        psyq.Queue(name, connection=url) as queue,
        psyq.QueueEvents(name, connection=url) as events,
    ):
        events.on("added", on_added)
        await _until_announced(conn, url, "e", name)
        job = await queue.add("seen", {})
        assert await asyncio.wait_for(added, 10) == job.id
        await heard.until(lambda p: p.startswith("e:") and p.endswith(name))


async def _until_idle(queue: psyq.Queue) -> None:
    """Until the worker took the first job and waits for more."""
    for _ in range(200):
        counts = await queue.get_job_counts("waiting", "active", "completed")
        if counts["completed"] == 1:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the worker did not finish the first job")


async def test_a_waiter_announcing_during_a_transition_is_not_left_asleep(
    setup: tuple[str, Heard, asyncpg.Connection],
) -> None:
    """The race of migration 0012: a transition decides to notify nobody (no entry yet),
    a waiter announces and reads before that transition commits. The announcement now waits
    for the transition, so the read sees the job it made ready."""
    url, _heard, conn = setup
    settings = parse_postgres_url(url)
    backend = PostgresBackend(url)
    await backend.open()
    name = fresh_name("race")
    qkey = f"bull:{name}"
    try:
        [job] = await backend.add_jobs(name, [NewJob("x", "{}", {"delay": 600_000})])
        async with conn.transaction():  # a promotion, paused after its wake decision
            await conn.execute(f"SET LOCAL search_path = {settings.schema}")
            await conn.execute(
                "UPDATE jobs SET state = 'waiting', due = NULL WHERE qkey = $1 AND id = $2",
                qkey,
                job.id,
            )
            await conn.execute("SELECT notify_heard($1, $2)", settings.channel, "j:" + qkey)
            waiting = asyncio.ensure_future(backend.wait_for_job(name, 30_000))
            done, _ = await asyncio.wait({waiting}, timeout=0.5)
            assert not done  # the announcement waits for this transaction
        await asyncio.wait_for(waiting, 10)  # woken by its read, not by the 30 s timeout
    finally:
        await backend.close()
