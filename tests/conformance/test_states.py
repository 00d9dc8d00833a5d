"""States and ordering: waiting, delayed, prioritized, lifo; reading jobs back and counting."""

from __future__ import annotations

import pytest

import psyq
from tests.polling import eventually

from .conftest import WorkerFactory, wait_state

ALL_STATES = (
    "waiting",
    "active",
    "completed",
    "failed",
    "delayed",
    "prioritized",
    "waiting-children",
    "paused",
)


async def take_all(worker: psyq.Worker) -> list[psyq.Job]:
    """Take every ready job, in the order the backend hands them out."""
    taken: list[psyq.Job] = []
    while (job := await worker.get_next_job(f"tok-{len(taken)}", block=False)) is not None:
        taken.append(job)
    return taken


async def test_plain_job_is_waiting(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    assert await job.get_state() == "waiting"
    assert await queue.get_job_state(job.id) == "waiting"


async def test_delayed_job_is_delayed(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, delay=60_000)
    assert await job.get_state() == "delayed"
    assert job.delay == 60_000


async def test_prioritized_job_is_prioritized(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, priority=5)
    assert await job.get_state() == "prioritized"
    assert job.priority == 5


async def test_priority_zero_is_waiting(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, priority=0)
    assert await job.get_state() == "waiting"


async def test_missing_job_state_is_unknown(queue: psyq.Queue) -> None:
    assert await queue.get_job_state("no-such-job") == "unknown"
    assert await queue.get_job("no-such-job") is None


async def test_delayed_job_is_not_taken_before_due(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("later", None, delay=60_000)
    worker = make_worker(None)
    assert await worker.get_next_job("t", block=False) is None


async def test_delayed_job_is_processed_once_due(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("soon", None, delay=50)
    make_worker(lambda job: "ok")
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.processed_on is not None
    assert done.processed_on >= done.timestamp + 50


async def test_priority_order_lower_first_fifo_within_and_plain_first(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    p3 = await queue.add("p3", None, priority=3)
    p1a = await queue.add("p1a", None, priority=1)
    plain = await queue.add("plain")
    p2 = await queue.add("p2", None, priority=2)
    p1b = await queue.add("p1b", None, priority=1)
    taken = await take_all(make_worker(None))
    assert [job.id for job in taken] == [plain.id, p1a.id, p1b.id, p2.id, p3.id]


async def test_waiting_jobs_are_fifo(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    jobs = [await queue.add(f"j{i}") for i in range(4)]
    taken = await take_all(make_worker(None))
    assert [job.id for job in taken] == [job.id for job in jobs]


async def test_lifo_job_is_taken_next(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    a = await queue.add("a")
    b = await queue.add("b")
    c = await queue.add("c", None, lifo=True)
    taken = await take_all(make_worker(None))
    assert [job.id for job in taken] == [c.id, a.id, b.id]


async def test_taken_job_is_active(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    job = await queue.add("a")
    taken = await make_worker(None).get_next_job("tok", block=False)
    assert taken is not None
    assert taken.id == job.id
    assert await job.get_state() == "active"
    assert taken.token == "tok"


async def test_get_jobs_slices_and_orders(queue: psyq.Queue) -> None:
    ids = [(await queue.add(f"j{i}")).id for i in range(5)]
    asc = await queue.get_jobs(["waiting"], 0, -1, asc=True)
    desc = await queue.get_jobs(["waiting"], 0, -1, asc=False)
    middle = await queue.get_jobs(["waiting"], 1, 2, asc=True)
    assert [job.id for job in asc] == ids
    assert [job.id for job in desc] == ids[::-1]
    assert [job.id for job in middle] == ids[1:3]


async def test_get_jobs_accepts_one_state_name(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    assert [j.id for j in await queue.get_jobs("waiting")] == [job.id]


async def test_get_jobs_concatenates_states_in_given_order(queue: psyq.Queue) -> None:
    waiting = await queue.add("w")
    delayed = await queue.add("d", None, delay=60_000)
    prioritized = await queue.add("p", None, priority=2)
    jobs = await queue.get_jobs(["delayed", "waiting", "prioritized"], asc=True)
    assert [job.id for job in jobs] == [delayed.id, waiting.id, prioritized.id]


async def test_get_jobs_of_empty_state_is_empty(queue: psyq.Queue) -> None:
    await queue.add("a")
    assert await queue.get_jobs(["completed", "failed"]) == []


async def test_get_job_counts_for_every_state(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    done = await queue.add("done")
    broken = await queue.add("broken")
    worker = make_worker(None)
    for job_id, outcome in ((done.id, "ok"), (broken.id, "fail")):
        job = await worker.get_next_job(f"tok-{job_id}", block=False)
        assert job is not None
        assert job.id == job_id
        if outcome == "ok":
            await job.move_to_completed("ok", f"tok-{job_id}")
        else:
            await job.move_to_failed(RuntimeError("no"), f"tok-{job_id}")
    await queue.add("active")
    assert await worker.get_next_job("tok-active", block=False) is not None
    await queue.add("w1")
    await queue.add("w2")
    await queue.add("d", None, delay=60_000)
    await queue.add("p", None, priority=4)
    counts = await queue.get_job_counts(*ALL_STATES)
    assert counts == {
        "waiting": 2,
        "active": 1,
        "completed": 1,
        "failed": 1,
        "delayed": 1,
        "prioritized": 1,
        "waiting-children": 0,
        "paused": 0,
    }


async def test_get_job_counts_without_states_counts_all(queue: psyq.Queue) -> None:
    await queue.add("a")
    counts = await queue.get_job_counts()
    assert set(ALL_STATES) <= set(counts)
    assert counts["waiting"] == 1


async def test_get_job_counts_only_named_states(queue: psyq.Queue) -> None:
    await queue.add("a")
    assert await queue.get_job_counts("waiting", "failed") == {"waiting": 1, "failed": 0}


async def test_count_is_jobs_still_to_process(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("taken")
    assert await make_worker(None).get_next_job("t", block=False) is not None
    await queue.add("w")
    await queue.add("d", None, delay=60_000)
    await queue.add("p", None, priority=1)
    assert await queue.count() == 3


async def test_paused_queue_counts_waiting_jobs_as_paused(queue: psyq.Queue) -> None:
    await queue.pause()
    job = await queue.add("a")
    counts = await queue.get_job_counts("paused")
    assert counts["paused"] == 1
    assert await queue.count() == 1
    assert await job.get_state() in ("waiting", "paused")


async def test_queues_are_isolated(backend_url: str, queue: psyq.Queue) -> None:
    await queue.add("mine")
    async with psyq.Queue(queue.name + "-other", connection=backend_url) as other:
        assert await other.count() == 0
        await other.add("theirs")
        await other.add("theirs too")
        assert await other.count() == 2
    assert await queue.count() == 1


async def test_state_helpers(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, delay=60_000)
    assert await job.is_delayed()
    assert not await job.is_waiting()
    await job.promote()
    await eventually(job.is_waiting)


async def test_finished_jobs_are_listed_newest_first(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    worker = make_worker(None)
    ids = []
    for i in range(3):
        await queue.add(f"j{i}")
        job = await worker.get_next_job(f"tok-{i}", block=False)
        assert job is not None
        await job.move_to_completed(i, f"tok-{i}")
        ids.append(job.id)
    assert [job.id for job in await queue.get_jobs(["completed"])] == ids[::-1]
    assert [job.id for job in await queue.get_jobs(["completed"], asc=True)] == ids
    assert [job.id for job in await queue.get_completed()] == ids[::-1]


async def test_get_jobs_rejects_unknown_state(queue: psyq.Queue) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="bogus"):
        await queue.get_jobs(["bogus"])
    with pytest.raises(psyq.InvalidOptionsError, match="bogus"):
        await queue.get_job_counts("bogus")


async def test_queue_emits_waiting_after_add(queue: psyq.Queue) -> None:
    seen: list[str] = []
    queue.on("waiting", lambda job: seen.append(job.id))
    job = await queue.add("a")
    bulk = await queue.add_bulk([{"name": "b"}])
    assert seen == [job.id, bulk[0].id]
