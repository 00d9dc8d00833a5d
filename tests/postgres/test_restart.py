"""Faults: the PostgreSQL server restarts (`pg_ctl restart -m fast`), or stops for a few
seconds and starts again, under a producer and two workers.

The test runs its own cluster (initdb in a temp dir, a free port), so the restart touches
nobody else. Counted like Jepsen's queue checker: every job the producer got an answer for
is invoked; afterwards each is ok (completed), failed, or lost. The leases (10 s) outlast
the restart, so no job may run twice either: a settle the restart cut is retried by the
worker until the server is back, inside its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import asyncpg
import pytest

import psyq
from psyq.rules.reconnect import Reconnect
from tests.conftest import fresh_name
from tests.polling import eventually

from .server import PrivateCluster, postgres_binaries

JOBS = 600
BATCH = 20
WORKERS = 2
CONCURRENCY = 10
LEASE_MS = 10_000
OUTAGE_S = 3.0  # the "outage" case: how long the server stays down


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    found = [path for path in postgres_binaries() if os.path.exists(path)]
    if not found:
        pytest.skip(
            "this test starts and restarts its own PostgreSQL server: it needs pg_ctl and "
            "initdb (apt install postgresql, or put them on PATH)"
        )
    server = PrivateCluster(found[0])
    try:
        server.start()
        yield server
    finally:
        server.destroy()


async def _started_at(url: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval("SELECT pg_postmaster_start_time()")
    finally:
        await conn.close()


async def _listening(url: str, app: str) -> int:
    """How many of the test's sessions are LISTEN connections (asyncpg's last statement on
    them is the LISTEN)."""
    conn = await asyncpg.connect(url)
    try:
        query = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = $1 AND query LIKE 'LISTEN %'"
        )
        return int(await conn.fetchval(query, app))
    finally:
        await conn.close()


async def _wait_listening(url: str, app: str, count: int) -> None:
    async def back() -> bool:
        return await _listening(url, app) >= count

    await eventually(back, f"{count} LISTEN connections back", 30)


async def _add_until_acknowledged(queue: psyq.Queue, first: int, errors: list[str]) -> None:
    """Add jobs first..first+BATCH-1 (custom ids, so a retried add never adds twice)."""
    jobs = [{"name": "x", "opts": {"jobId": f"r{i}"}} for i in range(first, first + BATCH)]
    backoff = Reconnect()
    while True:
        try:
            await queue.add_bulk(jobs)
            return
        except psyq.ConnectionError as exc:
            errors.append(str(exc))
            backoff.failed()
            await backoff.wait()


async def _produce(queue: psyq.Queue, errors: list[str], added: list[str]) -> list[str]:
    for first in range(0, JOBS, BATCH):
        await _add_until_acknowledged(queue, first, errors)
        added += [f"r{i}" for i in range(first, first + BATCH)]
        await asyncio.sleep(0.1)  # sleep: a pause between bursts: the producer spans the restart
    return added


async def _all_completed(queue: psyq.Queue) -> bool:
    return await _completed_count(queue) >= JOBS


async def _completed_count(queue: psyq.Queue) -> int:
    try:
        return (await queue.get_job_counts("completed"))["completed"]
    except psyq.ConnectionError:
        return -1


def _restart(cluster: PrivateCluster, how: str) -> None:
    if how == "restart":
        cluster.restart()
        return
    cluster.stop()
    time.sleep(OUTAGE_S)  # sleep: the fault itself: the server stays down this long
    cluster.start()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["restart", "outage"])
async def test_server_restart_loses_and_repeats_no_job(cluster: PrivateCluster, how: str) -> None:
    app = f"psyq_restart_{uuid.uuid4().hex[:8]}"
    url = f"{cluster.url}?schema={app}&application_name={app}&command_timeout=5"
    name = fresh_name("restart")
    runs: Counter[str] = Counter()
    worker_errors: list[BaseException] = []
    producer_errors: list[str] = []
    added: list[str] = []
    added_at_restart = 0

    async def process(job: psyq.Job) -> str:
        runs[job.id] += 1
        await asyncio.sleep(0.005)  # sleep: the job's work
        return job.id

    async with psyq.Queue(name, connection=url) as queue:
        workers = [
            psyq.Worker(
                name,
                process,
                connection=url,
                concurrency=CONCURRENCY,
                lock_duration=LEASE_MS,
                stalled_interval=1000,
                drain_delay=0.5,
            )
            for _ in range(WORKERS)
        ]
        for worker in workers:
            worker.on("error", worker_errors.append)
        before = await _started_at(cluster.url)
        producer = asyncio.create_task(_produce(queue, producer_errors, added))
        try:
            await eventually(lambda: len(added) >= JOBS // 2, "half the jobs added", 60)
            listeners = await _listening(cluster.url, app)
            await asyncio.to_thread(_restart, cluster, how)
            await _wait_listening(cluster.url, app, listeners)
            added_at_restart = len(added)
            await producer
            with contextlib.suppress(AssertionError):  # the counts below say what was not
                await eventually(lambda: _all_completed(queue), f"{JOBS} completed", 90)
        finally:
            producer.cancel()
            await asyncio.gather(*(asyncio.wait_for(w.close(), 30) for w in workers))
        states = {job_id: await queue.get_job_state(job_id) for job_id in added}
    after = await _started_at(cluster.url)
    ok = [job_id for job_id, state in states.items() if state == "completed"]
    failed = [job_id for job_id, state in states.items() if state == "failed"]
    lost = [job_id for job_id in added if job_id not in ok and job_id not in failed]
    duplicated = sorted(job_id for job_id, n in runs.items() if n > 1)
    print(
        f"\n{how}: invoked={len(added)} ok={len(ok)} failed={len(failed)} lost={len(lost)} "
        f"duplicated={len(duplicated)} worker errors={len(worker_errors)} "
        f"producer retries={len(producer_errors)} added before the restart={added_at_restart} "
        f"\nworker errors by type: {dict(Counter(type(e).__name__ for e in worker_errors))}"
    )
    assert after != before  # the server did restart
    assert listeners >= 1
    assert lost == [], {job_id: states[job_id] for job_id in lost[:20]}
    assert failed == []
    assert duplicated == []
    assert len(ok) == JOBS
