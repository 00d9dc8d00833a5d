"""Queue administration: pause/resume, drain, clean, obliterate, remove, retry, promote,
and retention of finished jobs."""

from __future__ import annotations

from typing import Any

import pytest

import psyq
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state


async def finish(queue: psyq.Queue, worker: psyq.Worker, outcome: str, n: int = 1) -> list[str]:
    """Add `n` jobs and settle each by hand as "completed" or "failed"; return their ids."""
    ids = []
    for i in range(n):
        await queue.add(f"{outcome}-{i}")
        job = await worker.get_next_job(f"tok-{outcome}-{i}", block=False)
        assert job is not None
        if outcome == "completed":
            await job.move_to_completed(i, f"tok-{outcome}-{i}")
        else:
            await job.move_to_failed(RuntimeError(f"no {i}"), f"tok-{outcome}-{i}")
        ids.append(job.id)
    return ids


async def test_pause_and_resume_flags(queue: psyq.Queue) -> None:
    assert await queue.is_paused() is False
    await queue.pause()
    assert await queue.is_paused() is True
    await queue.resume()
    assert await queue.is_paused() is False


async def test_paused_queue_gives_out_no_jobs(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a")
    await queue.pause()
    assert await make_worker(None).get_next_job("tok", block=False) is None


async def test_worker_resumes_after_resume(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await queue.pause()
    job = await queue.add("a")
    manual = make_worker(None)
    make_worker(lambda job: "after resume")
    assert await manual.get_next_job("tok", block=False) is None
    await queue.resume()
    await wait_state(queue, job.id, "completed")


async def test_drain_removes_waiting_and_prioritized_but_keeps_delayed(
    queue: psyq.Queue,
) -> None:
    await queue.add("w")
    await queue.add("p", None, priority=1)
    delayed = await queue.add("d", None, delay=60_000)
    await queue.drain()
    counts = await queue.get_job_counts("waiting", "prioritized", "delayed")
    assert counts == {"waiting": 0, "prioritized": 0, "delayed": 1}
    assert await queue.get_job(delayed.id) is not None


async def test_drain_delayed_too(queue: psyq.Queue) -> None:
    await queue.add("w")
    await queue.add("d", None, delay=60_000)
    await queue.drain(delayed=True)
    assert await queue.count() == 0


async def test_drain_keeps_finished_jobs(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await finish(queue, make_worker(None), "completed")
    await queue.add("w")
    await queue.drain(delayed=True)
    assert (await queue.get_job_counts("completed"))["completed"] == 1


async def test_clean_completed(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    ids = await finish(queue, make_worker(None), "completed", 3)
    removed = await queue.clean(0, 0, "completed")
    assert sorted(removed) == sorted(ids)
    assert (await queue.get_job_counts("completed"))["completed"] == 0
    assert await queue.get_job(ids[0]) is None


async def test_clean_failed_with_limit(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    ids = await finish(queue, make_worker(None), "failed", 3)
    removed = await queue.clean(0, 2, "failed")
    assert len(removed) == 2
    assert set(removed) <= set(ids)
    assert (await queue.get_job_counts("failed"))["failed"] == 1


async def test_clean_keeps_jobs_younger_than_grace(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await finish(queue, make_worker(None), "completed", 2)
    assert await queue.clean(3_600_000, 0, "completed") == []
    assert (await queue.get_job_counts("completed"))["completed"] == 2


async def test_clean_rejects_unknown_state(queue: psyq.Queue) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="bogus"):
        await queue.clean(0, 0, "bogus")


async def test_obliterate_removes_everything(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    ids = await finish(queue, make_worker(None), "completed", 2)
    await queue.add("w")
    await queue.add("d", None, delay=60_000)
    await queue.pause()
    await queue.obliterate()
    counts = await queue.get_job_counts()
    assert all(n == 0 for n in counts.values())
    assert await queue.get_job(ids[0]) is None
    assert await queue.is_paused() is False


async def test_obliterate_refuses_with_active_jobs(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a")
    assert await make_worker(None).get_next_job("tok", block=False) is not None
    with pytest.raises(psyq.PsyqError):
        await queue.obliterate()
    assert await job.get_state() == "active"
    await queue.obliterate(force=True)
    assert await queue.get_job(job.id) is None


async def test_queue_is_usable_after_obliterate(queue: psyq.Queue) -> None:
    await queue.add("a")
    await queue.obliterate()
    job = await queue.add("b")
    assert await job.get_state() == "waiting"


async def test_queue_remove(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    assert await queue.remove(job.id) is True
    assert await queue.get_job(job.id) is None
    assert await queue.remove(job.id) is False
    assert await queue.remove("no-such-job") is False


async def test_queue_remove_refuses_active_job(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a")
    assert await make_worker(None).get_next_job("tok", block=False) is not None
    assert await queue.remove(job.id) is False
    assert await job.get_state() == "active"


async def test_retry_jobs_moves_failed_back(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    ids = await finish(queue, make_worker(None), "failed", 3)
    assert await queue.retry_jobs(state="failed") == 3
    counts = await queue.get_job_counts("failed", "waiting")
    assert counts == {"failed": 0, "waiting": 3}
    assert await queue.get_job_state(ids[0]) == "waiting"


async def test_retry_jobs_completed(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await finish(queue, make_worker(None), "completed", 2)
    assert await queue.retry_jobs(state="completed") == 2
    assert (await queue.get_job_counts("waiting"))["waiting"] == 2


async def test_retried_jobs_are_processed_again(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    ids = await finish(queue, make_worker(None), "failed", 2)
    await queue.retry_jobs()
    make_worker(lambda job: "again")
    for job_id in ids:
        await wait_state(queue, job_id, "completed")


async def test_promote_jobs(queue: psyq.Queue) -> None:
    for i in range(3):
        await queue.add(f"d{i}", None, delay=60_000)
    assert await queue.promote_jobs() == 3
    counts = await queue.get_job_counts("delayed", "waiting")
    assert counts == {"delayed": 0, "waiting": 3}


async def test_promote_jobs_with_count(queue: psyq.Queue) -> None:
    for i in range(3):
        await queue.add(f"d{i}", None, delay=60_000)
    assert await queue.promote_jobs(count=2) == 2
    assert (await queue.get_job_counts("delayed"))["delayed"] == 1


@pytest.mark.parametrize(
    ("option", "kept"),
    [(True, 0), (False, 5), (2, 2), ({"count": 3}, 3), ({"age": 3600}, 5), (0, 0)],
    ids=["true", "false", "n", "count", "age", "zero"],
)
@pytest.mark.parametrize("outcome", ["completed", "failed"])
async def test_retention_of_finished_jobs(
    queue: psyq.Queue, make_worker: WorkerFactory, outcome: str, option: Any, kept: int
) -> None:
    name = "removeOnComplete" if outcome == "completed" else "removeOnFail"
    ids = [(await queue.add(f"j{i}", outcome, {name: option})).id for i in range(5)]

    async def process(job: psyq.Job) -> str:
        if job.data == "failed":
            raise RuntimeError("failing on purpose")
        return "ok"

    worker = make_worker(process)
    await Recorder(worker, outcome).wait(outcome, 5)

    async def settled() -> bool:
        return await queue.count() == 0 and (await queue.get_job_counts("active"))["active"] == 0

    await eventually(settled)
    counts = await queue.get_job_counts(outcome)
    assert counts[outcome] == kept
    survivors = [job_id for job_id in ids if await queue.get_job(job_id) is not None]
    assert survivors == ids[len(ids) - kept :]


@pytest.mark.parametrize("outcome", ["completed", "failed"])
@pytest.mark.parametrize("concurrency", [1, 5], ids=["one", "batched"])
async def test_a_workers_retention_applies_to_jobs_without_their_own(
    queue: psyq.Queue, make_worker: WorkerFactory, outcome: str, concurrency: int
) -> None:
    """BullMQ's worker options removeOnComplete/removeOnFail: the default for jobs that set
    none; a job's own option (false included) wins."""
    name = "removeOnComplete" if outcome == "completed" else "removeOnFail"
    await queue.add_bulk([{"name": f"p{i}", "data": outcome} for i in range(5)])

    async def process(job: psyq.Job) -> str:
        if job.data == "failed":
            raise RuntimeError("failing on purpose")
        return "ok"

    keep = {"remove_on_complete" if outcome == "completed" else "remove_on_fail": {"count": 2}}
    worker = make_worker(process, concurrency=concurrency, **keep)
    seen = Recorder(worker, outcome)
    await seen.wait(outcome, 5)

    async def settled() -> bool:
        return await queue.count() == 0 and (await queue.get_job_counts("active"))["active"] == 0

    await eventually(settled)
    assert (await queue.get_job_counts(outcome))[outcome] == 2
    own = (await queue.add("own", outcome, {name: False})).id
    await seen.wait(outcome, 6)
    await eventually(settled)
    assert await queue.get_job(own) is not None  # its own `false`: nothing removed
    assert (await queue.get_job_counts(outcome))[outcome] == 3


async def test_a_workers_retention_is_checked(make_worker: WorkerFactory) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="remove_on_fail"):
        make_worker(None, remove_on_fail={"count": -1})
