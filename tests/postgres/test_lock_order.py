"""Issue 40: producers whose batches share deduplication ids, parents and custom ids, in
any order, beside a worker, never deadlock: Postgres's own count of deadlocks in the
database (pg_stat_database.deadlocks) does not move. Each test has a database of its
own, so nobody else's deadlocks are counted."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from prometheus_client import CollectorRegistry, generate_latest

import psyq
from psyq.backends.postgres.statements import load_statements
from psyq.plugins.prometheus import PrometheusMetrics
from psyq.rules.conflicts import conflicts
from tests.conftest import fresh_name
from tests.polling import eventually
from tests.postgres.deadlocks import deadlocks, own_database, sessions_gone
from tests.postgres.lock_load import Load, make_parents, produce

ROOT = Path(__file__).resolve().parents[2]
TASKS, PROCESSES, BATCHES, PARENTS = 3, 2, 12, 12


@pytest.fixture
async def database(pg_server: str) -> AsyncIterator[str]:
    async with own_database(pg_server, "locks") as url:
        yield url


async def producer_process(load: Load) -> int:
    """One producer in a process of its own (its own pool and sessions)."""
    args = [load.url, load.queue, load.parent_queue, str(load.parents), str(load.batches)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.postgres.lock_load", *args, str(load.seed),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-2000:]
    return int(out.decode().split()[-1])


async def run_load(url: str, processes: int = PROCESSES) -> int:
    """TASKS producers in this process and `processes` more, beside a worker of
    concurrency 20 on the producers' queue that keeps 20 completed jobs; returns the calls
    made."""
    queue, parents = fresh_name("locks"), fresh_name("parents")
    await make_parents(url, queue, parents, PARENTS)
    loads = [Load(url, queue, parents, PARENTS, BATCHES, seed) for seed in range(TASKS + processes)]
    worker = psyq.Worker(  # keeping 20 completed jobs: finishers trim while producers add
        queue, lambda job: job.id, connection=url, concurrency=20, remove_on_complete=20
    )
    async with worker:
        calls = await asyncio.gather(
            *(produce(load) for load in loads[:TASKS]),
            *(producer_process(load) for load in loads[TASKS:]),
        )
    return sum(calls)


@pytest.mark.timeout(90)
async def test_producers_sharing_locks_never_deadlock(pg_server: str, database: str) -> None:
    before = await deadlocks(pg_server, database)
    calls = await run_load(database)
    await sessions_gone(pg_server, database)  # a session's counts are flushed as it ends
    assert calls == (TASKS + PROCESSES) * BATCHES * 3
    assert await deadlocks(pg_server, database) == before


async def test_the_count_sees_a_deadlock(pg_server: str, database: str) -> None:
    """The measure can fail: two sessions locking two keys in opposite orders count one."""
    before = await deadlocks(pg_server, database)
    first, second = await asyncpg.connect(database), await asyncpg.connect(database)
    lock = "SELECT pg_advisory_xact_lock($1)"
    try:
        for conn, key in ((first, 1), (second, 2)):
            await conn.execute("BEGIN")
            await conn.execute(lock, key)
        outcome = await asyncio.gather(
            first.execute(lock, 2), second.execute(lock, 1), return_exceptions=True
        )
    finally:
        await first.close()
        await second.close()
    assert any(isinstance(o, asyncpg.DeadlockDetectedError) for o in outcome)
    await sessions_gone(pg_server, database)
    assert await deadlocks(pg_server, database) == before + 1


async def test_a_deadlock_is_retried_counted_and_logged_once(
    pg_server: str, database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Another session (not psyq: it takes two of the locks an add takes, in the other
    order) deadlocks with the add three times: the add is run again each time and
    succeeds, the conflicts are counted for Prometheus, and logged once (one burst)."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    before = conflicts.counts().get(("postgres", "deadlock"), 0)
    name = fresh_name("deadlock")
    batch = [{"name": "j", "opts": {"deduplication": {"id": d}}} for d in ("a", "b")]
    lock = "SELECT pg_advisory_xact_lock(hashtext($1))"
    other = await asyncpg.connect(database)
    await other.execute("SET deadlock_timeout = '30s'")  # the add's session finds the cycle
    try:
        keys = [f"bullmq:dedup:{name}:{d}" for d in ("a", "b")]
        first, second = await other.fetchval(
            "SELECT array_agg(k ORDER BY hashtext(k)) FROM unnest($1::text[]) AS k", keys
        )
        async with psyq.Queue(name, connection=database, plugins=[metrics]) as queue:
            for _ in range(3):
                async with other.transaction():  # the add takes `first`, then waits here
                    await other.execute(lock, second)
                    adding = asyncio.ensure_future(queue.add_bulk(batch))
                    await waiting_for(other, second)
                    await other.execute(lock, first)
                await adding
    finally:
        await other.close()
    assert conflicts.counts()[("postgres", "deadlock")] - before == 3
    scraped = generate_latest(registry).decode()
    assert 'psyq_store_conflicts_total{cause="deadlock",store="postgres"}' in scraped
    logged = [r for r in caplog.records if r.name == "psyq.conflicts"]
    assert len(logged) == 1 and "postgres deadlock, retried at once" in logged[0].getMessage()


async def waiting_for(conn: asyncpg.Connection, name: str) -> None:
    """Until another session waits for advisory lock `name`."""
    query = """SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                AND objid = (hashtext($1)::bigint & 4294967295)::oid"""

    async def waited() -> bool:
        return bool(await conn.fetchval(query, name))

    await eventually(waited, f"a session waiting for {name}")


async def test_a_lock_renewal_waits_for_no_row(pg_server: str, database: str) -> None:
    """Renewing the locks of jobs whose rows another transaction holds (a settle of the
    same worker, in its own order) neither waits nor calls them lost; once free, they
    are renewed, and a job no longer active is lost."""
    name = fresh_name("renew")
    async with psyq.Queue(name, connection=database) as queue:
        await queue.add_bulk([{"name": "a"}, {"name": "b"}])
        worker = psyq.Worker(name, None, connection=database, autorun=False)
        try:
            first = await worker.get_next_job("t1")
            second = await worker.get_next_job("t2")
            assert first is not None and second is not None
            other = await asyncpg.connect(database)
            try:
                async with other.transaction():
                    await other.execute(
                        "SELECT 1 FROM bullmq.job WHERE queue = $1 AND id = $2 FOR UPDATE",
                        name,
                        first.id,
                    )
                    await asyncio.wait_for(first.extend_lock("t1", 60_000), 5)
                    await second.extend_lock("t2", 60_000)
            finally:
                await other.close()
            await first.extend_lock("t1", 60_000)
            await second.move_to_completed("done", "t2")
            with pytest.raises(psyq.LockError):
                await second.extend_lock("t2", 60_000)
        finally:
            await worker.close()


async def test_locks_are_taken_by_key_one_after_the_other(pg_server: str, database: str) -> None:
    """locks.take in a batch's order: blocked on the middle key (held elsewhere), it holds
    the smaller one and not yet the larger one, whatever order the names came in."""
    names = [f"bullmq:dedup:q:{n}" for n in range(12)]
    async with psyq.Queue(fresh_name("keys"), connection=database) as queue:
        await queue.add("makes the schema", {})
    first = await asyncpg.connect(database)
    second = await asyncpg.connect(database, server_settings={"search_path": "bullmq"})
    try:
        by_key = await first.fetchval(
            "SELECT array_agg(n ORDER BY hashtext(n)) FROM unnest($1::text[]) AS n", names
        )
        low, middle, high = by_key[0], by_key[6], by_key[-1]
        await first.execute("BEGIN")
        await first.execute("SELECT pg_advisory_xact_lock(hashtext($1))", middle)
        statement = load_statements()["locks.take"]
        taking = asyncio.ensure_future(
            second.execute(statement, [], names[::-1], ["dedup"] * 12, None, [])
        )
        await waiting_for(first, middle)
        held = await first.fetch(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1",
            second.get_server_pid(),
        )
        keys = {row["objid"] for row in held}
        assert await key_of(first, low) in keys and await key_of(first, high) not in keys
        await first.execute("COMMIT")
        await taking
    finally:
        await first.close()
        await second.close()


async def key_of(conn: asyncpg.Connection, name: str) -> int:
    return int(await conn.fetchval("SELECT (hashtext($1)::bigint & 4294967295)::oid", name))
