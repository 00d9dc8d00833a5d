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

import psyq
from tests.conftest import fresh_name
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
    concurrency 20 on the producers' queue; returns the calls made."""
    queue, parents = fresh_name("locks"), fresh_name("parents")
    await make_parents(url, queue, parents, PARENTS)
    loads = [Load(url, queue, parents, PARENTS, BATCHES, seed) for seed in range(TASKS + processes)]
    worker = psyq.Worker(queue, lambda job: job.id, connection=url, concurrency=20)
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
