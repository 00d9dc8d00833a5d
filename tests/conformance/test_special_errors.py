"""Processor signals: DelayedError, RateLimitError, WaitingChildrenError."""

from __future__ import annotations

import pytest

import psyq

from .conftest import Recorder, WorkerFactory, now_ms, skip_if_unsupported, wait_state


async def test_delayed_error_leaves_job_delayed_without_using_an_attempt(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    async def process(job: psyq.Job, token: str) -> str:
        if job.data["first"]:
            await job.update_data({"first": False})
            await job.move_to_delayed(now_ms() + 60_000, token)
            raise psyq.DelayedError()
        return "second run"

    job = await queue.add("a", {"first": True}, attempts=1)
    worker = make_worker(process)
    rec = Recorder(worker, "failed", "completed")
    await wait_state(queue, job.id, "delayed")
    delayed = await queue.get_job(job.id)
    assert delayed is not None
    assert delayed.attempts_made == 0
    assert delayed.failed_reason is None
    await delayed.promote()
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "second run"
    assert rec.events["failed"] == []


async def test_move_to_delayed_with_wrong_token_is_a_lock_error(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a")
    job = await make_worker(None).get_next_job("right", block=False)
    assert job is not None
    with pytest.raises(psyq.LockError):
        await job.move_to_delayed(now_ms() + 60_000, "wrong")
    assert await job.get_state() == "active"


async def test_rate_limit_error_hands_the_job_back_without_an_attempt(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    probe = make_worker(None)
    await skip_if_unsupported(probe.rate_limit(1), "worker.rate_limit (rate limits issue)")
    runs = 0
    holder: list[psyq.Worker] = []

    async def process(job: psyq.Job) -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            await holder[0].rate_limit(20)
            raise psyq.RateLimitError()
        return "after limit"

    job = await queue.add("a", None, attempts=1)
    worker = make_worker(process)
    holder.append(worker)
    rec = Recorder(worker, "failed")
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "after limit"
    assert done.attempts_made == 1
    assert runs == 2
    assert rec.events["failed"] == []


async def test_waiting_children_without_children_continues(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("probe")
    manual = make_worker(None)
    probe = await manual.get_next_job("probe-token", block=False)
    assert probe is not None
    waits = await skip_if_unsupported(
        probe.move_to_waiting_children("probe-token"), "move_to_waiting_children (flows issue)"
    )
    assert waits is False
    assert await probe.get_state() == "active"
