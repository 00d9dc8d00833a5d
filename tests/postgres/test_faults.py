"""Faults: a worker's connections are killed (pg_terminate_backend) while it runs jobs.

Counted like Jepsen's queue checker: every job added is invoked; afterwards each is ok
(completed), failed, or lost (neither). The test passes on lost == 0 and every job
completed; duplicates (a job run twice after its lease was recovered) are reported.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable

import asyncpg
import pytest

import psyq
from tests.conftest import fresh_name
from tests.polling import eventually

from .conftest import url_for

JOBS = 300
KILLS = 5


async def kill_connections(admin: asyncpg.Connection, application_name: str) -> int:
    rows = await admin.fetch(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        application_name,
    )
    return sum(1 for row in rows if row[0])


async def finished_count(admin: asyncpg.Connection, schema: str, name: str) -> int:
    """Finished jobs of queue `name`, read from BullMQ 6's `job` table (no key prefix)."""
    query = f"SELECT count(*) FROM {schema}.job WHERE queue = $1 AND finished_at_ms > 0"
    return int(await admin.fetchval(query, name))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrency", [5, 80])  # 80: many settlements per batch
async def test_killed_connections_lose_no_job(
    pg_server: str,
    admin: asyncpg.Connection,
    fresh_schema: Callable[[], str],
    concurrency: int,
) -> None:
    schema, app = fresh_schema(), f"psyq_fault_{uuid.uuid4().hex[:8]}"
    url = url_for(pg_server, schema, application_name=app, command_timeout="5")
    name = fresh_name("fault")
    runs: Counter[str] = Counter()

    async def process(job: psyq.Job) -> str:
        runs[job.id] += 1
        await asyncio.sleep(0.002)  # sleep: the job's work
        return job.id

    async with psyq.Queue(name, connection=url) as queue:
        added = [job.id for job in await queue.add_bulk([{"name": "x"}] * JOBS)]
        worker = psyq.Worker(
            name,
            process,
            connection=url,
            concurrency=concurrency,
            lock_duration=1000,
            stalled_interval=500,
            max_stalled_count=1000,  # a killed renewal may stall a job: it must come back
            drain_delay=0.5,
        )
        escaped = _record_escapes(worker)
        killed = 0
        try:
            for round_ in range(1, KILLS + 1):
                await _finished(admin, schema, name, JOBS * round_ // (KILLS + 1))
                killed += await kill_connections(admin, app)
            await _finished(admin, schema, name, JOBS, 60)
        except AssertionError:
            raise AssertionError(f"exceptions that left a worker slot: {escaped!r}") from None
        finally:
            await _close(worker)
        states = {job_id: await queue.get_job_state(job_id) for job_id in added}
    ok = [job_id for job_id, state in states.items() if state == "completed"]
    failed = [job_id for job_id, state in states.items() if state == "failed"]
    lost = [job_id for job_id in added if job_id not in ok and job_id not in failed]
    duplicated = [job_id for job_id, n in runs.items() if n > 1]
    print(
        f"\nfault: invoked={len(added)} ok={len(ok)} failed={len(failed)} lost={len(lost)} "
        f"duplicated={len(duplicated)} connections killed={killed}"
    )
    assert killed >= KILLS  # the fault happened
    assert lost == []
    assert len(ok) == JOBS


async def _finished(
    admin: asyncpg.Connection, schema: str, name: str, target: int, timeout: float = 30
) -> None:
    """Wait until `target` jobs of the queue finished; on a timeout, print every task's
    stack first (where the workers hang)."""

    async def reached() -> bool:
        return await finished_count(admin, schema, name) >= target

    try:
        await eventually(reached, f"{target} jobs of {name} finished", timeout)
    except AssertionError:
        for task in asyncio.all_tasks():
            task.print_stack(limit=6)
        raise


async def _close(worker: psyq.Worker, timeout: float = 20) -> None:
    """Close the worker; past `timeout`, print where every task waits, then fail."""
    closing = asyncio.ensure_future(worker.close())
    done, _ = await asyncio.wait({closing}, timeout=timeout)
    if not done:
        for task in asyncio.all_tasks():
            task.print_stack(limit=12)
        print(f"active jobs: {list(worker._active)!r}")
    await asyncio.wait_for(closing, 1)


def _record_escapes(worker: psyq.Worker) -> list[BaseException]:
    """Exceptions that leave the worker's per-job step (they would end its slot)."""
    escaped: list[BaseException] = []
    original = worker._process

    async def recording(ref: object, job: psyq.Job) -> object:
        try:
            return await original(ref, job)  # type: ignore[arg-type]
        except BaseException as exc:
            escaped.append(exc)
            raise

    worker._process = recording  # type: ignore[method-assign, assignment]
    return escaped
