"""Jobs inside the application's own transaction (docs/transactions.md): `transaction=` of
Queue.add, Queue.add_bulk and FlowProducer.add, and Job.complete_in, on asyncpg and
psycopg 3 connections to the test server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest

import psyq
from psyq.backends.postgres import PostgresBackend
from psyq.backends.postgres.transaction import psycopg_sql
from tests.conformance.conftest import wait_state
from tests.conftest import fresh_name
from tests.docs.test_examples import ROOT, blocks, run_script
from tests.polling import eventually

from .conftest import url_for

DRIVERS = ["asyncpg", "psycopg"]


async def connect(driver: str, server: str, **options: Any) -> Any:
    if driver == "asyncpg":
        return await asyncpg.connect(server)
    return await psycopg.AsyncConnection.connect(server, **options)


@pytest.fixture
async def url(pg_server: str, fresh_schema: Callable[[], str]) -> str:
    return url_for(pg_server, fresh_schema())


@pytest.fixture
async def queue(url: str) -> AsyncIterator[psyq.Queue]:
    async with psyq.Queue(fresh_name(), connection=url) as q:
        yield q


@pytest.fixture
async def events(url: str, queue: psyq.Queue) -> AsyncIterator[psyq.QueueEvents]:
    reader = psyq.QueueEvents(queue.name, connection=url, blocking_timeout=100)
    await reader.wait_until_ready(10)
    try:
        yield reader
    finally:
        await reader.close()


@pytest.fixture(params=DRIVERS)
async def conn(request: pytest.FixtureRequest, pg_server: str) -> AsyncIterator[Any]:
    """The application's connection (asyncpg, or psycopg 3 with autocommit on, so a
    transaction is open only inside `conn.transaction()`)."""
    connection = await connect(request.param, pg_server, autocommit=True)
    try:
        yield connection
    finally:
        await connection.close()


class Rollback(Exception):
    pass


async def seen_elsewhere(queue: psyq.Queue) -> int:
    """How many jobs the queue's own sessions see."""
    counts = await queue.get_job_counts()
    return sum(counts.values())


async def back_in_its_wait(worker: psyq.Worker) -> None:
    """Until the worker's fetcher, the job it took run, waits for the next job again."""
    await eventually(lambda: worker._takes.drained, "the worker back in its wait")


def schema_of(queue: psyq.Queue) -> str:
    """The Postgres schema the queue's backend reads and writes."""
    backend = queue._backend
    assert isinstance(backend, PostgresBackend), backend
    return backend.settings.schema


# ---------------------------------------------------------------- commit and rollback
async def test_add_is_invisible_until_commit_then_there(queue: psyq.Queue, conn: Any) -> None:
    async with conn.transaction():
        job = await queue.add("a", {"n": 1}, transaction=conn)
        bulk = await queue.add_bulk([{"name": "b"}, {"name": "c"}], transaction=conn)
        assert await seen_elsewhere(queue) == 0
    assert (await queue.get_job(job.id)).data == {"n": 1}  # type: ignore[union-attr]
    assert sorted(j.name for j in await queue.get_jobs(["waiting"])) == ["a", "b", "c"]
    assert {j.id for j in bulk} < {j.id for j in await queue.get_jobs(["waiting"])}


async def test_rollback_leaves_nothing(queue: psyq.Queue, conn: Any) -> None:
    with pytest.raises(Rollback):
        async with conn.transaction():
            await queue.add("a", transaction=conn, jobId="mine")
            await queue.add_bulk([{"name": "b"}, {"name": "c"}], transaction=conn)
            raise Rollback
    assert await seen_elsewhere(queue) == 0
    assert await queue.get_job("mine") is None


async def test_flow_commit_and_rollback(url: str, queue: psyq.Queue, conn: Any) -> None:
    tree = {"name": "parent", "queue_name": queue.name, "children": [
        {"name": "child", "queue_name": queue.name, "data": {"k": 1}}
    ]}  # fmt: skip
    async with psyq.FlowProducer(url) as flows:
        with pytest.raises(Rollback):
            async with conn.transaction():
                await flows.add(tree, transaction=conn)
                raise Rollback
        assert await seen_elsewhere(queue) == 0
        async with conn.transaction():
            node = await flows.add(tree, transaction=conn)
            assert await seen_elsewhere(queue) == 0
    assert await node.job.get_state() == "waiting-children"
    [child] = node.children
    assert await child.job.get_state() == "waiting"
    deps = await node.job.get_dependencies()
    assert deps["unprocessed"] == [f"{queue.name}:{child.job.id}"]


async def test_options_and_events_behave_as_for_a_plain_add(
    queue: psyq.Queue, conn: Any, events: psyq.QueueEvents
) -> None:
    added: list[str] = []
    events.on("added", lambda args, event_id: added.append(args["jobId"]))
    async with conn.transaction():
        delayed = await queue.add("d", transaction=conn, delay=60_000)
        urgent = await queue.add("p", transaction=conn, priority=3)
        first = await queue.add("x", transaction=conn, deduplication={"id": "once"})
        again = await queue.add("x", transaction=conn, deduplication={"id": "once"})
        mine = await queue.add("m", {"v": 1}, transaction=conn, jobId="m1")
    assert again.id == first.id
    assert await delayed.get_state() == "delayed"
    assert await urgent.get_state() == "prioritized"
    async with conn.transaction():  # an id that exists gives the stored job back
        same = await queue.add("m", {"v": 2}, transaction=conn, jobId="m1")
    assert (same.id, same.data) == (mine.id, {"v": 1})
    await eventually(lambda: mine.id in added, "the stream hearing the adds at commit")
    assert added == [delayed.id, urgent.id, first.id, mine.id]


async def test_the_application_search_path_is_kept(queue: psyq.Queue, conn: Any) -> None:
    """psyq's statements name the queues' schema themselves: the application's path is
    neither changed nor needed, in the same transaction."""
    show = "SELECT current_setting('search_path')"
    async with conn.transaction():
        await conn.execute("SET LOCAL search_path TO pg_catalog, public")
        await queue.add("a", transaction=conn)
        await queue.add_bulk([{"name": "b", "opts": {"jobId": "b1"}}], transaction=conn)
        if isinstance(conn, psycopg.AsyncConnection):
            path = (await (await conn.execute(show)).fetchone())[0]  # type: ignore[index]
        else:
            path = await conn.fetchval(show)
    assert path == "pg_catalog, public"
    assert await seen_elsewhere(queue) == 2


async def test_a_path_leading_to_other_queues_writes_in_the_backends_schema(
    url: str, queue: psyq.Queue, conn: Any, fresh_schema: Callable[[], str], pg_server: str
) -> None:
    """The application's search_path leads to another schema of queues: every statement
    psyq runs on its transaction (add, bulk add, records of custom ids, deduplication, a
    flow and its records, a completion's locks) still reads and writes the backend's."""
    async with psyq.Queue(queue.name, connection=url_for(pg_server, fresh_schema())) as other:
        schema = schema_of(other)
        async with conn.transaction():
            await conn.execute(f"SET LOCAL search_path TO {schema}")
            await queue.add("a", transaction=conn)
            await queue.add_bulk([{"name": "b"}, {"name": "c"}], transaction=conn)
            await queue.add_bulk([{"name": "d", "opts": {"jobId": "d1"}}], transaction=conn)
            await queue.add("e", transaction=conn, deduplication={"id": "once"})
            async with psyq.FlowProducer(url) as flows:
                tree = {"name": "p", "queue_name": queue.name, "children": [{"name": "k"}]}
                tree["children"][0]["queue_name"] = queue.name  # type: ignore[index]
                await flows.add(tree, transaction=conn)
        assert await seen_elsewhere(queue) == 7
        assert await seen_elsewhere(other) == 0


async def test_the_layouts_functions_called_there_carry_their_own_path(
    queue: psyq.Queue, admin: asyncpg.Connection
) -> None:
    """What lets psyq call the layout's functions schema-qualified under the application's
    search_path: each is declared `SET search_path FROM CURRENT` (BullMQ's migrations;
    Node bullmq 6.7's redefinitions keep it), so the names inside resolve in the layout."""
    schema = schema_of(queue)
    rows = await admin.fetch(
        "SELECT p.proname, p.proconfig FROM pg_proc p JOIN pg_namespace n"
        " ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = ANY($2::text[])",
        schema,
        ["add_job", "add_jobs_bulk", "add_flow", "move_to_completed"],
    )
    assert len({row["proname"] for row in rows}) == 4
    for row in rows:
        assert f"search_path={schema}" in (row["proconfig"] or []), row["proname"]


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_transactional_add_sends_one_statement(
    queue: psyq.Queue, pg_server: str, driver: str
) -> None:
    """A connection is checked on its first transactional add; then an add sends the one
    statement of a plain add (the layout's add_job) and nothing else."""
    sent: list[str] = []
    conn = await counting(driver, pg_server, sent)
    try:
        for _ in range(2):
            async with conn.transaction():
                first = await noted(sent)
                await queue.add("a", {"n": 1}, transaction=conn)
                middle = await noted(sent)
                await queue.add("b", {"n": 2}, transaction=conn)
                last = await noted(sent)
                await queue.add_bulk([{"name": "c"}], transaction=conn)
                after_bulk = await noted(sent)
            if sent[first:middle][0].startswith("SELECT current_database()"):
                assert middle - first == 2  # the check, then the add: once per connection
                first += 1
            assert (middle - first, last - middle, after_bulk - last) == (1, 1, 1)
            assert "add_job(" in sent[last - 1]
        assert sum("current_database()" in sql for sql in sent) == 1
    finally:
        await conn.close()
    assert await seen_elsewhere(queue) == 6


async def test_a_pool_connection_is_checked_once(queue: psyq.Queue, pg_server: str) -> None:
    """asyncpg's pool hands a new proxy at every acquire: the check is remembered by the
    connection behind it."""
    pool = await asyncpg.create_pool(pg_server, min_size=1, max_size=1)
    sent: list[str] = []

    def note(record: Any) -> None:
        sent.append(record.query)

    try:
        for _ in range(3):
            async with pool.acquire() as conn:
                conn.add_query_logger(note)  # on the connection behind: kept past release
                async with conn.transaction():
                    await queue.add("a", transaction=conn)
                await noted(sent)
                conn.remove_query_logger(note)
    finally:
        await pool.close()
    assert sum("current_database()" in sql for sql in sent) == 1
    assert sum("add_job(" in sql for sql in sent) == 3
    assert await seen_elsewhere(queue) == 3


async def noted(sent: list[str]) -> int:
    """How many statements were noted, once asyncpg's query loggers have run (it calls
    them soon after each statement, not in it)."""
    for _ in range(3):
        await asyncio.sleep(0)
    return len(sent)


async def counting(driver: str, server: str, sent: list[str]) -> Any:
    """A connection (autocommit on) that notes every statement sent through it in `sent`
    (the application's BEGIN and COMMIT left out)."""
    if driver == "asyncpg":
        conn = await asyncpg.connect(server)

        def note(record: Any) -> None:
            if record.query.strip(" ;").upper() not in ("BEGIN", "COMMIT", "ROLLBACK"):
                sent.append(record.query)

        conn.add_query_logger(note)
        return conn

    class Counting(psycopg.AsyncCursor[Any]):
        async def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return await super().execute(query, *args, **kwargs)

    return await psycopg.AsyncConnection.connect(server, autocommit=True, cursor_factory=Counting)


def test_psycopg_placeholders_are_translated_once_per_statement() -> None:
    sql = "SELECT $1::text, $10::int, $1 || '%' WHERE $2 = $1"
    assert psycopg_sql(sql) == (
        "SELECT %(p1)s::text, %(p10)s::int, %(p1)s || '%%' WHERE %(p2)s = %(p1)s"
    )
    assert psycopg_sql(sql) is psycopg_sql(sql)  # cached


# ---------------------------------------------------------------- workers hear the commit
async def test_a_waiting_worker_starts_a_committed_job_as_fast_as_a_plain_one(
    url: str, queue: psyq.Queue, pg_server: str
) -> None:
    """The worker waits (drain_delay 10 s, far longer than any wake-up) from before the
    commit: it is woken by the commit's NOTIFY, as by a plain add's."""
    started: asyncio.Queue[float] = asyncio.Queue()

    async def process(job: psyq.Job) -> None:
        started.put_nowait(time.monotonic())

    conn = await asyncpg.connect(pg_server)
    worker = psyq.Worker(queue.name, process, url, drain_delay=10)
    try:
        await worker.wait_until_ready()
        await queue.add("warm")
        await asyncio.wait_for(started.get(), 10)
        plain, in_tx = [], []
        for _ in range(3):
            await back_in_its_wait(worker)
            sent = time.monotonic()
            await queue.add("plain")
            plain.append(await asyncio.wait_for(started.get(), 5) - sent)
            await back_in_its_wait(worker)
            async with conn.transaction():
                await queue.add("tx", transaction=conn)
                sent = time.monotonic()
            in_tx.append(await asyncio.wait_for(started.get(), 5) - sent)
        print(f"add to start, median of 3: plain {sorted(plain)[1] * 1000:.1f} ms, "
              f"committed transaction {sorted(in_tx)[1] * 1000:.1f} ms")  # fmt: skip
        assert max(in_tx) < 2.0  # woken by the commit, not by the 10 s poll
    finally:
        await worker.close()
        await conn.close()


# ---------------------------------------------------------------- refusals
async def test_other_backends_refuse_naming_the_value(tmp_path: Any, conn: Any) -> None:
    async with psyq.Queue(fresh_name(), connection="memory://") as other:
        with pytest.raises(psyq.TransactionError, match="memory backend") as caught:
            await other.add("a", transaction=conn)
        assert repr(conn) in str(caught.value)
        assert await seen_elsewhere(other) == 0
        async with psyq.FlowProducer("memory://") as flows:
            with pytest.raises(psyq.TransactionError):
                await flows.add({"name": "a", "queue_name": other.name}, transaction=conn)

        async def complete_in(job: psyq.Job) -> None:
            await job.complete_in(conn, 1)

        job = await other.add("b")
        async with psyq.Worker(other.name, complete_in, "memory://"):
            await wait_state(other, job.id, "failed", timeout=10)
        failed = await other.get_job(job.id)
        assert failed is not None and failed.failed_reason is not None
        assert "memory backend" in failed.failed_reason


async def test_refused_outside_a_transaction(queue: psyq.Queue, conn: Any) -> None:
    with pytest.raises(psyq.TransactionError, match="not inside a transaction"):
        await queue.add("a", transaction=conn)
    with pytest.raises(psyq.TransactionError, match="not an asyncpg Connection"):
        await queue.add_bulk([{"name": "a"}], transaction="postgresql://elsewhere")
    assert await seen_elsewhere(queue) == 0


@pytest.mark.parametrize("driver", DRIVERS)
async def test_refused_on_another_database(queue: psyq.Queue, pg_server: str, driver: str) -> None:
    other = pg_server.rsplit("/", 1)[0] + "/postgres"
    conn = await connect(driver, other, autocommit=True)
    try:
        async with conn.transaction():
            with pytest.raises(psyq.TransactionError, match="database 'postgres'"):
                await queue.add("a", transaction=conn)
            await conn.execute("SELECT 1")  # the application's transaction goes on
    finally:
        await conn.close()
    assert await seen_elsewhere(queue) == 0


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_checked_connection_lets_no_other_database_through(
    queue: psyq.Queue, pg_server: str, driver: str
) -> None:
    """The check is remembered by connection object: a connection of the backend's database
    checked, then new connections to another database, each refused, while the first one
    goes on."""
    home = await connect(driver, pg_server, autocommit=True)
    try:
        async with home.transaction():
            await queue.add("home", transaction=home)
        for _ in range(2):
            other = await connect(
                driver, pg_server.rsplit("/", 1)[0] + "/postgres", autocommit=True
            )
            try:
                async with other.transaction():
                    with pytest.raises(psyq.TransactionError, match="database 'postgres'"):
                        await queue.add("a", transaction=other)
            finally:
                await other.close()
        async with home.transaction():
            await queue.add("home again", transaction=home)
    finally:
        await home.close()
    assert sorted(j.name for j in await queue.get_jobs(["waiting"])) == ["home", "home again"]


async def test_a_schema_without_the_layout_is_refused(queue: psyq.Queue, pg_server: str) -> None:
    """A connection whose database has no layout in the backend's schema (dropped after
    the backend opened it) is refused before anything is written."""
    conn = await asyncpg.connect(pg_server)
    try:
        schema = schema_of(queue)
        async with conn.transaction():
            await conn.execute(f"ALTER SCHEMA {schema} RENAME TO {schema}_away")
            with pytest.raises(psyq.TransactionError, match="no queue layout in schema"):
                await queue.add("a", transaction=conn)
            raise Rollback
    except Rollback:
        pass
    finally:
        await conn.close()


async def test_a_schema_named_by_a_keyword_is_quoted(pg_server: str) -> None:
    """A schema whose name is a reserved word (`order`) is named quoted in every
    statement, on the pool and on the application's transaction. In a database of its
    own, dropped after."""
    database = f"psyq_t_{fresh_name().replace('-', '_')}"
    admin = await asyncpg.connect(pg_server)
    await admin.execute(f"CREATE DATABASE {database}")
    server = pg_server.rsplit("/", 1)[0] + "/" + database
    try:
        async with psyq.Queue(fresh_name(), connection=url_for(server, "order")) as queue:
            await queue.add("plain")
            for driver in DRIVERS:
                conn = await connect(driver, server, autocommit=True)
                try:
                    async with conn.transaction():
                        await queue.add(driver, transaction=conn)
                        await queue.add_bulk(
                            [{"name": "b", "opts": {"jobId": driver}}], transaction=conn
                        )
                finally:
                    await conn.close()
            assert await seen_elsewhere(queue) == 5
    finally:
        await admin.execute(f"DROP DATABASE {database} WITH (FORCE)")
        await admin.close()


async def test_psycopg_failed_transaction_is_refused(queue: psyq.Queue, pg_server: str) -> None:
    conn = await psycopg.AsyncConnection.connect(pg_server)  # autocommit off
    try:
        await queue.add("implicit", transaction=conn)  # its first statement opens one
        await conn.commit()
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("SELECT 1 / 0")
        with pytest.raises(psyq.TransactionError, match="roll it back"):
            await queue.add("a", transaction=conn)
    finally:
        await conn.close()
    assert [j.name for j in await queue.get_jobs(["waiting"])] == ["implicit"]


DIVISION_BY_ZERO = (asyncpg.DivisionByZeroError, psycopg.errors.DivisionByZero)


async def test_a_failed_transaction_is_refused_on_both_drivers(
    queue: psyq.Queue, conn: Any
) -> None:
    """Its statement failed: the next add is refused as the docs say, on either driver,
    whether the connection was checked before or not, and nothing is written."""
    for checked_before in (False, True):
        if checked_before:
            async with conn.transaction():
                await queue.add("kept", transaction=conn)
        with pytest.raises(Rollback):
            async with conn.transaction():
                with pytest.raises(DIVISION_BY_ZERO):
                    await conn.execute("SELECT 1 / 0")
                with pytest.raises(psyq.TransactionError, match="failed: roll it back first"):
                    await queue.add("a", transaction=conn)
                with pytest.raises(psyq.TransactionError, match="failed: roll it back first"):
                    await queue.add_bulk([{"name": "b"}], transaction=conn)
                raise Rollback
    assert [j.name for j in await queue.get_jobs(["waiting"])] == ["kept"]


@pytest.mark.parametrize("driver", DRIVERS)
async def test_a_closed_connection_is_refused_as_closed(
    queue: psyq.Queue, pg_server: str, driver: str
) -> None:
    conn = await connect(driver, pg_server, autocommit=True)
    async with conn.transaction():
        await queue.add("kept", transaction=conn)  # checked while open
    await conn.close()
    with pytest.raises(psyq.TransactionError, match="the connection is closed"):
        await queue.add("a", transaction=conn)
    assert [j.name for j in await queue.get_jobs(["waiting"])] == ["kept"]


# ---------------------------------------------------------------- completing in a transaction
async def effects_table(pg_server: str) -> str:
    """A table of the processor's own writes (dropped with the test's connection)."""
    name = fresh_name("effects").replace("-", "_")
    conn = await asyncpg.connect(pg_server)
    try:
        await conn.execute(f"CREATE TABLE {name} (job_id text, writer text)")
    finally:
        await conn.close()
    return name


async def write_effect(conn: Any, table: str, job_id: str, writer: str) -> None:
    """The processor's own write, on the application's connection (either driver)."""
    if isinstance(conn, psycopg.AsyncConnection):
        await conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (job_id, writer))
    else:
        await conn.execute(f"INSERT INTO {table} VALUES ($1, $2)", job_id, writer)


async def effect_rows(pg_server: str, table: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(pg_server)
    try:
        rows = await conn.fetch(f"SELECT job_id, writer FROM {table} ORDER BY job_id")
        await conn.execute(f"DROP TABLE {table}")
    finally:
        await conn.close()
    return [(row["job_id"], row["writer"]) for row in rows]


@pytest.mark.parametrize("driver", DRIVERS)
async def test_completion_in_transaction_is_never_applied_twice_after_a_stall(
    url: str, queue: psyq.Queue, events: psyq.QueueEvents, pg_server: str, driver: str
) -> None:
    """Worker A takes each job, writes its effect, and before completing loses the job:
    its lock runs out, worker B's stall check hands the job out again and B takes it. A's
    complete_in raises LockError and its write rolls back; B's commits. Over several runs,
    every job has exactly one effect, B's."""
    table = await effects_table(pg_server)
    taken_by_b: dict[str, asyncio.Event] = {}
    a_started: asyncio.Queue[str] = asyncio.Queue()
    outcomes: dict[str, list[str]] = {"A": [], "B": []}

    def processor(writer: str) -> Any:
        async def process(job: psyq.Job) -> str:
            gate = taken_by_b.setdefault(job.id, asyncio.Event())
            if writer == "B":
                gate.set()
            else:
                a_started.put_nowait(job.id)
            conn = await connect(driver, pg_server, autocommit=True)
            try:
                async with conn.transaction():
                    await write_effect(conn, table, job.id, writer)
                    if writer == "A":
                        await asyncio.wait_for(gate.wait(), 10)
                    try:
                        await job.complete_in(conn, writer)
                    except psyq.LockError:
                        outcomes[writer].append(job.id)
                        raise
            finally:
                await conn.close()
            return writer

        return process

    a = psyq.Worker(queue.name, processor("A"), url, lock_duration=150,
                    skip_lock_renewal=True, skip_stalled_check=True)  # fmt: skip
    b: psyq.Worker | None = None
    try:
        jobs = [await queue.add("pay", {"n": n}) for n in range(3)]
        await a.wait_until_ready()
        first = await asyncio.wait_for(a_started.get(), 10)
        b = psyq.Worker(queue.name, processor("B"), url, stalled_interval=50)
        for job in jobs:
            await job.wait_until_finished(events, timeout=10)
        assert first == jobs[0].id
    finally:
        await a.close(force=True)
        if b is not None:
            await b.close()
    rows = await effect_rows(pg_server, table)
    assert rows == sorted((job.id, "B") for job in jobs)  # one effect per job: lost 0, dup 0
    assert outcomes["A"] and not outcomes["B"]
    for job in jobs:
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.returnvalue == "B"


async def test_rolled_back_completion_retries_by_the_job_attempts(
    url: str, queue: psyq.Queue, events: psyq.QueueEvents, pg_server: str
) -> None:
    """Attempt 1 completes on its transaction, which rolls back (the processor raises,
    or swallows the rollback and returns): the attempt fails and the job is retried;
    attempt 2 commits. One effect, two attempts, the worker settles nothing twice."""
    table = await effects_table(pg_server)
    swallowed: list[str] = []

    async def process(job: psyq.Job) -> str:
        conn = await asyncpg.connect(pg_server)
        try:
            async with conn.transaction():
                await write_effect(conn, table, job.id, "w")
                await job.complete_in(conn, job.attempts_made)
                if job.attempts_made == 0:
                    raise Rollback
        except Rollback:
            if job.data["swallow"]:
                swallowed.append(job.id)
                return "returned anyway"
            raise
        finally:
            await conn.close()
        return "unused"

    async with psyq.Worker(queue.name, process, url):
        jobs = [await queue.add("t", {"swallow": s}, attempts=2) for s in (False, True)]
        results = [await job.wait_until_finished(events, timeout=10) for job in jobs]
    assert results == [1, 1]
    assert swallowed == [jobs[1].id]
    for job in jobs:
        assert (await queue.get_job(job.id)).attempts_made == 2  # type: ignore[union-attr]
    assert await effect_rows(pg_server, table) == sorted((job.id, "w") for job in jobs)


async def test_complete_in_refuses_a_job_no_worker_holds(queue: psyq.Queue, conn: Any) -> None:
    job = await queue.add("a")
    async with conn.transaction():
        with pytest.raises(psyq.LockError, match=repr(job.id)):
            await job.complete_in(conn, 1)
    assert await job.get_state() == "waiting"


# ---------------------------------------------------------------- the documentation's examples
async def test_the_documentation_page_runs(
    pg_server: str, fresh_schema: Callable[[], str], tmp_path: Path
) -> None:
    """docs/transactions.md's blocks, in order as one script, against the test server:
    its DSN, a fresh schema for its queues and a table of its own for its orders."""
    table = fresh_name("shop_orders").replace("-", "_")
    page = (ROOT / "docs" / "transactions.md").read_text()
    page = page.replace('"postgresql://postgres@127.0.0.1:5432/test"', repr(pg_server))
    page = page.replace("schema=bullmq", f"schema={fresh_schema()}").replace("shop_orders", table)
    (tmp_path / "transactions.md").write_text(page)
    namespace: dict[str, object] = {}

    def run_the_page() -> None:  # one script, its asyncio.run on a loop of its own
        for line, code, _reason in blocks(tmp_path / "transactions.md"):
            run_script(code, f"transactions.md:{line}", namespace)

    conn = await asyncpg.connect(pg_server)
    try:
        await asyncio.wait_for(asyncio.to_thread(run_the_page), 60)
        rows = await conn.fetch(f"SELECT item, confirmed FROM {table} ORDER BY id")
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.close()
    assert [tuple(row) for row in rows] == [("book", True), ("pen", None), ("lamp", None)]
