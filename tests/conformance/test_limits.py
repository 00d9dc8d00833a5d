"""Rate limits and concurrency that hold across every worker of a queue."""

from __future__ import annotations

import asyncio
import time

import pytest

import psyq
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state


async def finish_times(queue: psyq.Queue) -> list[int]:
    done = await queue.get_completed()
    return sorted(job.processed_on or 0 for job in done)


def max_in_window(stamps: list[int], window: int) -> int:
    return max(sum(1 for t in stamps if start <= t < start + window) for start in stamps)


async def test_worker_limiter_caps_jobs_per_duration(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add_bulk([{"name": "x"} for _ in range(12)])
    worker = make_worker(lambda job: None, concurrency=10, limiter={"max": 4, "duration": 200})
    rec = Recorder(worker, "completed")
    started = time.monotonic()
    await rec.wait("completed", 12, timeout=10)
    assert time.monotonic() - started >= 0.35  # 12 jobs at 4 per 200 ms need 3 windows
    assert max_in_window(await finish_times(queue), 200) <= 4


async def test_global_rate_limit_holds_across_workers(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.set_global_rate_limit(3, 200)
    await queue.add_bulk([{"name": "x"} for _ in range(9)])
    workers = [make_worker(lambda job: None, concurrency=5) for _ in range(2)]
    recs = [Recorder(w, "completed") for w in workers]
    await eventually(lambda: sum(len(r.events["completed"]) for r in recs) >= 9, "9 completed")
    assert max_in_window(await finish_times(queue), 200) <= 3


async def test_global_concurrency_holds_across_workers(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.set_global_concurrency(2)
    running = 0
    peak = 0

    async def process(job: psyq.Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)  # sleep: the job's work, the slot held
        running -= 1

    await queue.add_bulk([{"name": "x"} for _ in range(12)])
    workers = [make_worker(process, concurrency=4) for _ in range(3)]
    recs = [Recorder(w, "completed") for w in workers]
    await eventually(lambda: sum(len(r.events["completed"]) for r in recs) >= 12, "12 completed")
    assert peak <= 2


async def test_worker_rate_limit_holds_the_queue(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    limited = False

    async def process(job: psyq.Job) -> str:
        nonlocal limited
        if not limited:
            limited = True
            await worker.rate_limit(300)
            raise psyq.RateLimitError()
        return "ok"

    job = await queue.add("x")
    started = time.monotonic()
    worker = make_worker(process)
    rec = Recorder(worker, "completed")
    await rec.wait("completed", 1)
    assert time.monotonic() - started >= 0.25
    done = await queue.get_job(job.id)
    assert done is not None and done.attempts_made == 1


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda q: q.set_global_concurrency(0), "concurrency"),
        (lambda q: q.set_global_rate_limit(-1, 100), "max"),
        (lambda q: q.set_global_rate_limit(1, 0), "duration"),
    ],
)
async def test_bad_limits_are_refused(queue: psyq.Queue, call: object, named: str) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match=named):
        await call(queue)  # type: ignore[operator]


async def test_bad_worker_limiter_is_refused(backend_url: str, queue_name: str) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="limiter"):
        psyq.Worker(queue_name, lambda job: None, connection=backend_url, limiter={"max": -1})


async def test_attempts_started_counts_every_start_after_a_rate_limit(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    """BullMQ increases attemptsStarted every time a job is moved to active, a run ended by
    RateLimitError included; so its "stop retrying on a manual rate limit" pattern fails
    the job once it has started `attempts` times."""
    starts: list[int] = []

    async def process(job: psyq.Job) -> str:
        starts.append(job.attempts_started)
        if job.attempts_started >= job.opts["attempts"]:
            raise psyq.UnrecoverableError("rate limited too often")
        await worker.rate_limit(10)
        raise psyq.RateLimitError()

    job = await queue.add("x", None, attempts=2)
    worker = make_worker(process)
    rec = Recorder(worker, "failed")
    await rec.wait("failed")
    assert starts == [1, 2]
    failed = await queue.get_job(job.id)
    assert failed is not None
    assert failed.attempts_started == 2
    assert failed.failed_reason == "rate limited too often"


async def test_remove_rate_limit_key_ends_the_limit(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    """BullMQ's removeRateLimitKey deletes the limiter key: the ttl is gone at once and the
    queue's jobs run again."""
    await queue.rate_limit(60_000)
    assert await queue.get_rate_limit_ttl() > 0
    assert await queue.remove_rate_limit_key() is True
    assert await queue.get_rate_limit_ttl() == 0
    job = await queue.add("x")
    make_worker(lambda job: "ran")
    await wait_state(queue, job.id, "completed")


async def test_a_worker_rate_limit_is_removed_by_remove_rate_limit_key(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    manual = make_worker(None)
    await manual.rate_limit(60_000)
    assert await queue.remove_rate_limit_key() is True
    assert await queue.get_rate_limit_ttl() == 0
    await queue.add("x")
    assert await manual.get_next_job("after-removal", block=False) is not None
