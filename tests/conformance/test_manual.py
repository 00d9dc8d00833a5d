"""Manual processing: a Worker without a processor takes jobs and settles them itself."""

from __future__ import annotations

import pytest

import psyq

from .conftest import WorkerFactory


async def test_get_next_job_returns_an_active_job(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    added = await queue.add("a", {"k": 1})
    job = await make_worker(None).get_next_job("tok")
    assert isinstance(job, psyq.Job)
    assert (job.id, job.name, job.data) == (added.id, "a", {"k": 1})
    assert job.token == "tok"
    assert await job.get_state() == "active"


async def test_get_next_job_on_empty_queue_returns_none(make_worker: WorkerFactory) -> None:
    worker = make_worker(None, drain_delay=0.05)
    assert await worker.get_next_job("tok", block=False) is None
    assert await worker.get_next_job("tok") is None


async def test_move_to_completed(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await queue.add("a")
    job = await make_worker(None).get_next_job("tok")
    assert job is not None
    assert await job.move_to_completed({"done": True}, "tok") is None
    done = await queue.get_job(job.id)
    assert done is not None
    assert await done.get_state() == "completed"
    assert done.returnvalue == {"done": True}
    assert done.attempts_made == 1
    assert done.finished_on is not None


async def test_move_to_completed_can_fetch_the_next_job(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a")
    second = await queue.add("b")
    job = await make_worker(None).get_next_job("tok")
    assert job is not None
    nxt = await job.move_to_completed("ok", "tok", fetch_next=True)
    assert nxt is not None
    assert nxt.id == second.id
    assert await nxt.get_state() == "active"
    assert nxt.token
    await nxt.move_to_completed("ok", nxt.token)
    assert (await queue.get_job_counts("completed"))["completed"] == 2


async def test_move_to_completed_rejects_non_json_result(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a")
    job = await make_worker(None).get_next_job("tok")
    assert job is not None
    with pytest.raises(psyq.InvalidDataError):
        await job.move_to_completed(object(), "tok")
    assert await job.get_state() == "active"


async def test_move_to_failed(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await queue.add("a")
    job = await make_worker(None).get_next_job("tok")
    assert job is not None
    await job.move_to_failed(Exception("x"), "tok")
    failed = await queue.get_job(job.id)
    assert failed is not None
    assert await failed.get_state() == "failed"
    assert failed.failed_reason == "x"
    assert failed.attempts_made == 1


async def test_move_to_failed_retries_while_attempts_remain(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a", None, attempts=2, backoff={"type": "fixed", "delay": 60_000})
    worker = make_worker(None)
    job = await worker.get_next_job("tok")
    assert job is not None
    await job.move_to_failed(Exception("x"), "tok")
    assert await job.get_state() == "delayed"


async def test_worker_without_processor_cannot_run(make_worker: WorkerFactory) -> None:
    worker = make_worker(None)
    with pytest.raises(psyq.InvalidOptionsError):
        await worker.run()
