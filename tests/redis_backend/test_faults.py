"""A worker killed with SIGKILL mid-load: its jobs come back through the stall check and every
job is processed. Counted like Jepsen's queue checker: lost must be 0 (duplicates are allowed:
delivery is at least once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psyq
from tests.polling import eventually

JOBS = 200
LOCK_MS = 500

WORKER = textwrap.dedent(
    """
    import asyncio, sys
    import psyq

    async def main(queue, url, lock_ms):
        async def process(job):
            await asyncio.sleep(0.005)
            return job.data
        worker = psyq.Worker(queue, process, connection=url, concurrency=20,
                             lock_duration=lock_ms, stalled_interval=lock_ms)
        worker.on("completed", lambda job, result: print("done", flush=True))
        await asyncio.Event().wait()

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_jobs_of_a_killed_worker_are_all_processed(queue: psyq.Queue, url: str) -> None:
    await queue.add_bulk([{"name": "j", "data": i} for i in range(JOBS)])
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, queue.name, url, str(LOCK_MS)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert proc.stdout is not None
        for _ in range(20):  # let it finish some jobs while it holds others
            assert proc.stdout.readline(), "the worker process died before processing"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    worker = psyq.Worker(
        queue.name,
        lambda job: job.data,
        connection=url,
        concurrency=20,
        lock_duration=LOCK_MS,
        stalled_interval=LOCK_MS // 2,
    )

    async def all_completed() -> bool:
        return (await queue.get_job_counts("completed"))["completed"] >= JOBS

    try:
        await eventually(all_completed, f"all {JOBS} jobs completed", 30, interval=0.05)
    except AssertionError as late:
        raise AssertionError(f"{late}; counts: {await queue.get_job_counts()}") from None
    finally:
        await worker.close()
    finished = await queue.get_jobs(["completed"])
    lost = set(range(JOBS)) - {job.data for job in finished}
    assert lost == set()
    counts = await queue.get_job_counts()
    assert counts["completed"] == JOBS and counts["failed"] == 0 and counts["active"] == 0
