"""A job scheduler keeps running across a Redis restart (SIGTERM or kill -9, AOF always) and
a `CLIENT KILL` of every connection (issue 39): a scheduler every 300 ms still produces runs
after the fault, from the same Worker, with no new upsert.

Before the fix, the worker computed the next run over a pooled connection that had gone
stale: the error was only logged ("no next run for scheduler ...") and the scheduler stopped
for good. The test prints the runs before and after and the time from the server answering
again to the first run after it."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from redis.asyncio import Redis

import psyq
from tests.polling import eventually
from tests.redis_service import RedisProcess

EVERY_MS = 300
BEFORE_S = 1.5
RUNS_AFTER = 5  # runs the scheduler must produce after the fault
RESUME_LIMIT_S = 20  # a deadline for those runs, not a figure asserted


async def _kill_clients(server: RedisProcess) -> None:
    """CLIENT KILL every normal connection but this one (a proxy or an admin would)."""
    admin = Redis.from_url(server.url)
    try:
        await admin.client_kill_filter(_type="normal", skipme=True)
    finally:
        await admin.aclose()


async def _fault(server: RedisProcess, kind: str) -> None:
    if kind == "client-kill":
        await _kill_clients(server)
        return
    server.stop(signal.SIGKILL if kind == "kill-9" else signal.SIGTERM)
    await asyncio.sleep(0.3)  # sleep: the outage itself
    server.start()


async def _wait_runs(runs: list[float], count: int) -> None:
    await eventually(lambda: len(runs) >= count, f"{count} runs", RESUME_LIMIT_S, 0.02)


@pytest.mark.parametrize("kind", ["restart", "kill-9", "client-kill"])
async def test_a_scheduler_keeps_running_across_a_fault(
    redis_process: RedisProcess, queue_name: str, kind: str
) -> None:
    runs: list[float] = []

    async def process(job: psyq.Job) -> None:
        runs.append(time.monotonic())

    queue = psyq.Queue(queue_name, connection=redis_process.url)
    worker = psyq.Worker(queue_name, process, connection=redis_process.url)
    worker.on("error", lambda error: None)  # the outage's errors: counted by the runs
    try:
        await queue.upsert_job_scheduler("tick", {"every": EVERY_MS}, {"name": "tick"})
        await asyncio.sleep(BEFORE_S)  # sleep: the scheduler runs a while before the fault
        before = len(runs)
        await _fault(redis_process, kind)
        back = time.monotonic()
        await _wait_runs(runs, before + RUNS_AFTER)
    finally:
        await worker.close()
        await queue.close()
    first_after = next(at for at in runs[before:] if at >= back) - back
    print(
        f"{kind}: {before} runs in {BEFORE_S}s before; {RUNS_AFTER} after, the first "
        f"{first_after:.2f}s after the server answered, the fifth {runs[before + 4] - back:.2f}s"
    )
    assert before >= 2


async def test_a_worker_start_repairs_a_scheduler_whose_next_run_was_lost(
    redis_process: RedisProcess, queue_name: str
) -> None:
    """The state a worker leaves when it stops before its next run landed: the scheduler
    scored by a run that was taken, no pending run. Before the fix only a new upsert
    restarted such a scheduler; now a worker's start does."""
    runs: list[float] = []

    async def process(job: psyq.Job) -> None:
        runs.append(time.monotonic())

    queue = psyq.Queue(queue_name, connection=redis_process.url)
    raw = Redis.from_url(redis_process.url, decode_responses=True)
    try:
        await queue.upsert_job_scheduler("tick", {"every": EVERY_MS}, {"name": "tick"})
        taker = psyq.Worker(queue_name, connection=redis_process.url, autorun=False)
        taken = await taker.get_next_job("token", block=True)
        while taken is None:
            taken = await taker.get_next_job("token", block=True)
        await taker.close()
        pending = await _lose_next_run(raw, queue_name, taken.id)
        assert await queue.get_job(pending) is None
        worker = psyq.Worker(queue_name, process, connection=redis_process.url)
        await _wait_runs(runs, 3)
        await worker.close()
    finally:
        await raw.aclose()
        await queue.close()


async def _lose_next_run(raw: Redis, queue: str, taken: str) -> str:
    """Undo the next run a take added: remove its job and score the scheduler by the taken
    run again. Returns the removed run's id."""
    key = f"bull:{queue}"
    [scored] = await raw.zrange(f"{key}:repeat", 0, -1, withscores=True)
    assert isinstance(scored, tuple), scored
    _, millis = scored
    pending = f"repeat:tick:{int(millis)}"
    await raw.zrem(f"{key}:delayed", pending)  # due in 300 ms, or already promoted
    await raw.lrem(f"{key}:wait", 0, pending)
    await raw.delete(f"{key}:{pending}")
    await raw.zadd(f"{key}:repeat", {"tick": int(taken.rpartition(":")[2])})
    return pending
