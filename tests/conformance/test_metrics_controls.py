"""Metrics, counts, the worker registry, and job controls (cancel, timeout, discard, logs)."""

from __future__ import annotations

import asyncio
import threading

import psyq
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state


async def test_metrics_count_finished_jobs_per_minute(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add_bulk([{"name": "ok"}] * 3 + [{"name": "bad"}] * 2)

    def process(job: psyq.Job) -> None:
        if job.name == "bad":
            raise ValueError("bad")

    worker = make_worker(process)
    rec = Recorder(worker, "completed", "failed")
    await rec.wait("completed", 3)
    await rec.wait("failed", 2)
    completed = await queue.get_metrics("completed")
    failed = await queue.get_metrics("failed")
    assert completed["meta"]["count"] == 3 and completed["data"][0] == 3
    assert failed["meta"]["count"] == 2 and failed["data"][0] == 2
    assert completed["count"] >= 1


async def test_counts_per_priority(queue: psyq.Queue) -> None:
    await queue.add_bulk(
        [
            {"name": "a"},
            {"name": "b", "opts": {"priority": 1}},
            {"name": "c", "opts": {"priority": 1}},
            {"name": "d", "opts": {"priority": 5}},
        ]
    )
    assert await queue.get_counts_per_priority([0, 1, 5, 9]) == {"0": 1, "1": 2, "5": 1, "9": 0}


async def test_worker_registry(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    worker = make_worker(lambda job: None, concurrency=3)
    workers = await eventually(queue.get_workers)
    assert [w["name"] for w in workers] == [worker.id]
    assert workers[0]["concurrency"] == 3
    await worker.close()
    assert await queue.get_workers() == []


async def test_cancel_a_running_async_job(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    started = asyncio.Event()

    async def process(job: psyq.Job) -> None:
        started.set()
        await asyncio.sleep(30)  # sleep: the job's work, cancelled long before it ends

    job = await queue.add("long", attempts=3)
    worker = make_worker(process)
    rec = Recorder(worker, "failed")
    await asyncio.wait_for(started.wait(), 5)
    assert await queue.cancel_job(job.id, "user asked")
    await rec.wait("failed")
    failed = await queue.get_job(job.id)
    assert failed is not None
    assert "user asked" in (failed.failed_reason or "")
    assert await failed.get_state() == "failed"  # cancelled: no retry
    assert not await queue.cancel_job(job.id)  # no longer active
    assert worker.is_running()


async def test_cancel_a_running_thread_job(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    seen = threading.Event()
    saw_cancel = threading.Event()

    def process(job: psyq.Job) -> None:
        seen.set()
        for _ in range(500):
            if job.cancelled:
                saw_cancel.set()
                return
            threading.Event().wait(0.01)

    job = await queue.add("long")
    make_worker(process)
    await asyncio.to_thread(seen.wait, 5)
    assert await queue.cancel_job(job.id, "stop")
    await wait_state(queue, job.id, "failed")
    assert saw_cancel.is_set()


async def test_timeout_fails_the_attempt(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    async def process(job: psyq.Job) -> str:
        if job.attempts_made == 0:
            await asyncio.sleep(5)  # sleep: the first attempt outlasts its timeout
        return "second try"

    job = await queue.add("slow", timeout=50, attempts=2)
    make_worker(process)
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None and done.returnvalue == "second try"
    assert "timed out after 50 ms" in (done.failed_reason or "")


async def test_discard_stops_retries(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    def process(job: psyq.Job) -> None:
        job.discard()
        raise ValueError("do not retry")

    job = await queue.add("x", attempts=5)
    make_worker(process)
    await wait_state(queue, job.id, "failed")
    failed = await queue.get_job(job.id)
    assert failed is not None and failed.attempts_made == 1


async def test_clear_logs(queue: psyq.Queue) -> None:
    job = await queue.add("x")
    for i in range(5):
        await job.log(f"row {i}")
    await job.clear_logs(keep=2)
    assert (await queue.get_job_logs(job.id))["logs"] == ["row 3", "row 4"]
    await job.clear_logs()
    assert (await queue.get_job_logs(job.id))["count"] == 0
