"""Locks and stalled jobs: renewal keeps long jobs, lost workers' jobs come back."""

from __future__ import annotations

import asyncio

import pytest

import psyq
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state

LOCK_MS = 200
# Renewed every 500 ms: a renewal may come ~500 ms late on a busy machine (300 ms, renewed
# every 150 ms, once lost its lock on a tcp run with two CPU burners beside it).
RENEWED_LOCK_MS = 1000


async def test_lock_renewal_keeps_a_long_job_alive(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    async def process(job: psyq.Job) -> str:
        await asyncio.sleep(1.6 * RENEWED_LOCK_MS / 1000)  # sleep: the job's work outlives its lock
        return "long"

    job = await queue.add("long")
    worker = make_worker(process, lock_duration=RENEWED_LOCK_MS, stalled_interval=LOCK_MS // 2)
    rec = Recorder(worker, "stalled", "error")
    checker = make_worker(None, stalled_interval=LOCK_MS // 2)
    moved: list[str] = []

    async def completed_while_checked() -> bool:
        moved.extend(await checker.check_stalled())
        return await job.get_state() == "completed"

    await eventually(completed_while_checked)
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "long"
    assert done.attempts_made == 1
    assert done.stalled_counter == 0
    assert moved == []
    assert rec.events == {"stalled": [], "error": []}


async def test_job_of_a_lost_worker_is_recovered_by_another(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("orphan", {"n": 1})
    lost = make_worker(None, lock_duration=LOCK_MS)
    taken = await lost.get_next_job("lost-token", block=False)
    assert taken is not None  # ... and never completed nor renewed
    rescuer = make_worker(lambda job: "rescued", stalled_interval=LOCK_MS)
    rec = Recorder(rescuer, "stalled", "completed")
    await wait_state(queue, job.id, "completed")
    assert rec.events["stalled"][0][0] == job.id
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "rescued"
    assert done.stalled_counter == 1


async def test_late_completion_after_losing_the_lock_is_a_lock_error(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("orphan")
    lost = make_worker(None, lock_duration=LOCK_MS)
    taken = await lost.get_next_job("lost-token", block=False)
    assert taken is not None
    make_worker(lambda job: "rescued", stalled_interval=LOCK_MS)
    await wait_state(queue, job.id, "completed")
    with pytest.raises(psyq.LockError):
        await taken.move_to_completed("too late", "lost-token")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "rescued"


async def test_max_stalled_count_exceeded_fails_the_job(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    ran: list[str] = []
    job = await queue.add("orphan")
    lost = make_worker(None, lock_duration=LOCK_MS)
    assert await lost.get_next_job("lost-token", block=False) is not None
    make_worker(lambda job: ran.append(job.id), stalled_interval=LOCK_MS, max_stalled_count=0)
    await wait_state(queue, job.id, "failed")
    failed = await queue.get_job(job.id)
    assert failed is not None
    assert "stalled" in (failed.failed_reason or "")
    assert ran == []


async def test_a_job_failed_for_stalling_emits_stalled_and_failed_on_the_worker(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    """As Node BullMQ's worker: `stalled` (job id, "active") for the stalled job, then
    `failed` with the job and an UnrecoverableError saying it stalled too often."""
    job = await queue.add("orphan")
    lost = make_worker(None, lock_duration=LOCK_MS)
    assert await lost.get_next_job("lost-token", block=False) is not None
    checker = make_worker(None, max_stalled_count=0)
    rec = Recorder(checker, "stalled", "failed")

    async def check() -> bool:
        return job.id in await checker.check_stalled()

    await eventually(check)
    assert rec.events["stalled"] == [(job.id, "active")]
    [(failed, error)] = rec.events["failed"]
    assert failed.id == job.id and failed.failed_reason == "job stalled more than allowable limit"
    assert isinstance(error, psyq.UnrecoverableError)
    assert str(error) == "job stalled more than allowable limit"


async def test_every_stall_is_counted_the_last_one_too(
    queue: psyq.Queue, queue_events: psyq.QueueEvents, make_worker: WorkerFactory
) -> None:
    """max_stalled_count=1: the first stall sends the job back, the second fails it; each
    counts in stalled_counter and gives a `stalled` event, as in BullMQ (stc + 1 each)."""
    events = Recorder(queue_events, "stalled")
    job = await queue.add("orphan")
    lost = make_worker(None, lock_duration=LOCK_MS)
    checker = make_worker(None, max_stalled_count=1)
    for token in ("first-token", "second-token"):
        assert await lost.get_next_job(token) is not None

        async def check() -> bool:
            return job.id in await checker.check_stalled()

        await eventually(check)
    await wait_state(queue, job.id, "failed")
    failed = await queue.get_job(job.id)
    assert failed is not None and failed.stalled_counter == 2
    assert [args[0] for args in await events.wait("stalled", 2)] == [{"jobId": job.id}] * 2


async def test_check_stalled_returns_the_moved_ids(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("orphan")
    lost = make_worker(None, lock_duration=LOCK_MS)
    assert await lost.get_next_job("lost-token", block=False) is not None
    checker = make_worker(None, stalled_interval=LOCK_MS)
    moved: list[str] = []

    async def check() -> bool:
        moved.extend(await checker.check_stalled())
        return job.id in moved

    await eventually(check)
    assert await job.get_state() == "waiting"


async def test_an_active_job_with_a_live_lock_is_not_stalled(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("held")
    holder = make_worker(None, lock_duration=60_000)
    taken = await holder.get_next_job("held-token", block=False)
    assert taken is not None
    checker = make_worker(None, stalled_interval=LOCK_MS)
    for _ in range(3):
        assert job.id not in await checker.check_stalled()
    assert await job.get_state() == "active"


async def test_extend_lock_with_right_token(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await queue.add("a")
    taken = await make_worker(None).get_next_job("tok", block=False)
    assert taken is not None
    await taken.extend_lock("tok", 60_000)
    with pytest.raises(psyq.LockError):
        await taken.extend_lock("other", 60_000)


async def test_move_to_completed_with_wrong_token_is_a_lock_error(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a")
    taken = await make_worker(None).get_next_job("right", block=False)
    assert taken is not None
    with pytest.raises(psyq.LockError):
        await taken.move_to_completed("x", "wrong")
    assert await taken.get_state() == "active"
    await taken.move_to_completed("x", "right")
    assert await taken.get_state() == "completed"


async def test_move_to_failed_with_wrong_token_is_a_lock_error(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a")
    taken = await make_worker(None).get_next_job("right", block=False)
    assert taken is not None
    with pytest.raises(psyq.LockError):
        await taken.move_to_failed(RuntimeError("x"), "wrong")
    assert await taken.get_state() == "active"


class RenewAtCompletion:
    """A plugin that renews its worker's locks in the middle of a completion: the store
    has completed the job, the worker has not yet let it go, as when the renewal timer
    fires while the completion's reply is on its way back."""

    def __init__(self) -> None:
        self.worker: psyq.Worker | None = None
        self.lost: list[str] = []

    @psyq.hookimpl
    async def psyq_job_completed(self, job: psyq.Job, result: object) -> None:
        assert self.worker is not None
        self.lost += await self.worker.extend_locks()


async def test_a_renewal_that_loses_the_race_with_its_own_completion_is_no_error(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    """Issue 41 (defect 3): the store may answer such a renewal 'lock lost' (the job is no
    longer active: Postgres and the engine say so, Redis's extendLocks leaves a
    finished job out); the worker counts it (`statistics()`), logs it at debug, and emits
    no `error`: nothing failed."""
    plugin = RenewAtCompletion()
    worker = make_worker(lambda job: "done", plugins=[plugin])
    plugin.worker = worker
    rec = Recorder(worker, "completed", "error")
    job = await queue.add("j", {})
    await rec.wait("completed")
    assert plugin.lost in ([], [job.id])
    assert rec.events["error"] == []
    assert worker.statistics()["renewals_after_settle"] == len(plugin.lost)
