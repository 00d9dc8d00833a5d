"""A graceful restart (SIGTERM) of `psyq server` keeps its live workers' jobs locked.

Before issue 49 a clean stop wrote the active jobs as a kill leaves them: the new server
loaded them with expired locks, so the first stalled check (here every 300 ms, faster than
the workers renew) sent them back to waiting while their workers still ran them, and they
ran twice (59 over 3 restarts in the report). Now the stop writes each active job's lock
expiry and the new server loads it, so the reconnecting workers renew and finish them.

`PSYQ_SOAK_SCALE` (`make soak`: 10) multiplies the jobs and the restarts."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import psyq
from tests.polling import eventually
from tests.server.server_proc import start_server

SCALE = float(os.environ.get("PSYQ_SOAK_SCALE", "1"))
TOTAL = round(60 * SCALE)
RESTARTS = round(3 * SCALE)
pytestmark = pytest.mark.timeout(60 + 30 * SCALE)


async def test_sigterm_restarts_under_running_jobs_run_no_job_twice(
    tmp_path: Path, queue_name: str
) -> None:
    data = ("--data", str(tmp_path / "jobs.db"))
    log = tmp_path / "server.log"
    server = start_server(log, *data)
    url = server.url + "?connect_timeout=30"
    runs: Counter[str] = Counter()
    running: set[str] = set()
    done: set[str] = set()
    errors: list[Any] = []

    async def work(job: psyq.Job) -> None:
        runs[job.id] += 1
        running.add(job.id)
        try:
            await asyncio.sleep(1)  # sleep: the job's work, under way across the kill
        finally:
            running.discard(job.id)

    queue = psyq.Queue(queue_name, connection=url)
    await queue.add_bulk([{"name": "x", "data": {"i": i}} for i in range(TOTAL)])
    # locks renewed every 2.5 s, stalled checks every 300 ms: a job loaded with an expired
    # lock is taken back long before its worker renews it
    options: dict[str, Any] = dict(
        concurrency=10, lock_duration=5000, stalled_interval=300, max_stalled_count=50
    )
    worker = psyq.Worker(queue_name, work, connection=url, **options)
    worker.on("error", errors.append)
    worker.on("completed", lambda job, result: done.add(job.id))
    restarted_at: list[float] = []
    began_all = time.monotonic()
    try:
        for _ in range(RESTARTS):
            await eventually(busy(running, runs, len(runs)), "5 jobs running, one new", 30)
            began = time.monotonic()
            assert await asyncio.to_thread(server.stop) == 0
            server = await asyncio.to_thread(start_server, log, *data, port=server.port)
            restarted_at.append(time.monotonic() - began)
        await eventually(lambda: len(done) == TOTAL, f"{TOTAL} completed", 60 * SCALE)
        counts = await queue.get_job_counts("completed", "active", "waiting")
    finally:
        await worker.close(force=True)
        await queue.close()
        server.stop()
    twice = sorted(job_id for job_id, count in runs.items() if count > 1)
    lock_errors = [e for e in errors if isinstance(e, psyq.LockError)]
    took = time.monotonic() - began_all
    print(
        f"server restarts: jobs={TOTAL} restarts={RESTARTS} in {took:.1f}s "
        f"(each {max(restarted_at):.2f}s at most) "
        f"ran={len(runs)} ran twice={len(twice)} lock errors={len(lock_errors)} "
        f"worker errors={len(errors)}"
    )
    assert twice == []
    assert lock_errors == []
    assert counts == {"completed": TOTAL, "active": 0, "waiting": 0}


def busy(running: set[str], runs: Counter[str], started: int) -> Callable[[], bool]:
    """Whether 5 jobs run, one of them started since `started` jobs had."""
    return lambda: len(running) >= 5 and len(runs) > started
