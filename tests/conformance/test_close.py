"""Closing a worker: graceful close finishes the active job; forced close hands it back."""

from __future__ import annotations

import asyncio

import pytest

import psyq

from .conftest import Recorder, WorkerFactory, wait_state


async def test_graceful_close_waits_for_the_active_job(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    started = asyncio.Event()

    async def process(job: psyq.Job) -> str:
        started.set()
        await asyncio.sleep(0.2)  # sleep: the job's work, still running when close() is called
        return "finished"

    job = await queue.add("a")
    worker = make_worker(process)
    rec = Recorder(worker, "completed", "closed")
    await asyncio.wait_for(started.wait(), 5)
    await worker.close()
    assert await job.get_state() == "completed"
    assert len(rec.events["completed"]) == 1
    assert rec.events["closed"] == [()]
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "finished"


async def test_graceful_close_takes_no_new_jobs(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def process(job: psyq.Job) -> None:
        started.set()
        await release.wait()

    first = await queue.add("first")
    worker = make_worker(process)
    await asyncio.wait_for(started.wait(), 5)
    second = await queue.add("second")
    closing = asyncio.create_task(worker.close())
    release.set()
    await asyncio.wait_for(closing, 5)
    assert await first.get_state() == "completed"
    assert await second.get_state() == "waiting"


async def test_forced_close_hands_the_job_back(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    started = asyncio.Event()
    never = asyncio.Event()

    async def hang(job: psyq.Job) -> None:
        started.set()
        await never.wait()

    job = await queue.add("a", {"n": 1})
    worker = make_worker(hang)
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.wait_for(worker.close(force=True), 5)
    assert await job.get_state() == "waiting"
    make_worker(lambda job: "second worker")
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "second worker"


async def test_close_is_idempotent(make_worker: WorkerFactory) -> None:
    worker = make_worker(lambda job: None)
    await worker.close()
    await worker.close()


async def test_closed_worker_cannot_fetch(make_worker: WorkerFactory) -> None:
    worker = make_worker(None)
    await worker.close()
    with pytest.raises(psyq.ClosedError):
        await worker.get_next_job("tok", block=False)


async def test_closed_queue_cannot_add(backend_url: str, queue_name: str) -> None:
    queue = psyq.Queue(queue_name, connection=backend_url)
    await queue.add("a")
    await queue.close()
    with pytest.raises(psyq.ClosedError):
        await queue.add("b")


async def test_wait_until_ready_opens_the_store_before_the_first_call(
    backend_url: str, queue_name: str
) -> None:
    """BullMQ's waitUntilReady: after it, calls find the store open; on a closed queue or
    worker it says so."""
    queue = psyq.Queue(queue_name, connection=backend_url)
    worker = psyq.Worker(queue_name, None, connection=backend_url)
    await queue.wait_until_ready()
    await worker.wait_until_ready()
    await worker.wait_until_ready()  # again: the same connection, nothing new
    job = await queue.add("a")
    fetched = await worker.get_next_job("tok", block=False)
    assert fetched is not None and fetched.id == job.id
    await worker.close()
    await queue.close()
    for closed in (queue, worker):
        with pytest.raises(psyq.ClosedError):
            await closed.wait_until_ready()
