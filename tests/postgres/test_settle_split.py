"""A large settle batch is settled as two concurrent transactions: every job still
completes exactly once, and every slot gets its own next job."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

import psyq
from psyq.backends.postgres.backend import SPLIT_SETTLES_FROM
from tests.conftest import fresh_name

from .conftest import url_for

JOBS = 3000


@pytest.mark.timeout(120)
async def test_split_settles_complete_every_job_once(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    url = url_for(pg_server, fresh_schema())
    name = fresh_name("split")
    runs: Counter[str] = Counter()
    done = asyncio.Event()

    async def process(job: psyq.Job) -> str:
        runs[job.id] += 1
        if len(runs) == JOBS:
            done.set()
        return job.id

    async with psyq.Queue(name, connection=url) as queue:
        await queue.add_bulk([{"name": "x", "data": i} for i in range(JOBS)])
        worker = psyq.Worker(name, process, connection=url, concurrency=2 * SPLIT_SETTLES_FROM)
        try:
            await asyncio.wait_for(done.wait(), 90)
        finally:
            await worker.close()
        counts = await queue.get_job_counts("completed", "active", "waiting")
    assert counts == {"completed": JOBS, "active": 0, "waiting": 0}
    assert [job_id for job_id, n in runs.items() if n != 1] == []
