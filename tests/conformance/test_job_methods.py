"""Job methods: progress, logs, data, priority, delay, promote, retry, remove."""

from __future__ import annotations

import pytest

import psyq

from .conftest import Recorder, WorkerFactory, wait_state


async def test_update_progress_is_stored(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    await job.update_progress(50)
    assert job.progress == 50
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.progress == 50


async def test_update_progress_accepts_json_objects(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    await job.update_progress({"rows": 10, "of": 20})
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.progress == {"rows": 10, "of": 20}


async def test_update_progress_rejects_non_json(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    with pytest.raises(psyq.InvalidDataError):
        await job.update_progress(object())


async def test_progress_from_processor_is_stored_and_emitted(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    async def process(job: psyq.Job) -> None:
        await job.update_progress(10)
        await job.update_progress(90)

    job = await queue.add("a")
    worker = make_worker(process)
    rec = Recorder(worker, "progress")
    await wait_state(queue, job.id, "completed")
    assert [value for _, value in rec.events["progress"]] == [10, 90]
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.progress == 90


async def test_log_rows_are_read_back(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    for row in ("one", "two", "three"):
        await job.log(row)
    assert await queue.get_job_logs(job.id) == {"logs": ["one", "two", "three"], "count": 3}


async def test_log_returns_the_row_count(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    assert await job.log("one") == 1
    assert await job.log("two") == 2


async def test_get_job_logs_slices(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    for row in ("r0", "r1", "r2", "r3"):
        await job.log(row)
    assert await queue.get_job_logs(job.id, 0, 0) == {"logs": ["r0"], "count": 4}
    assert await queue.get_job_logs(job.id, 1, 2) == {"logs": ["r1", "r2"], "count": 4}


async def test_get_job_logs_of_job_without_logs(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    assert await queue.get_job_logs(job.id) == {"logs": [], "count": 0}


async def test_keep_logs_keeps_the_newest_rows(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, keep_logs=2)
    for row in ("one", "two", "three"):
        await job.log(row)
    assert await queue.get_job_logs(job.id) == {"logs": ["two", "three"], "count": 2}


async def test_update_data(queue: psyq.Queue) -> None:
    job = await queue.add("a", {"v": 1})
    await job.update_data({"v": 2})
    assert job.data == {"v": 2}
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.data == {"v": 2}


async def test_update_data_rejects_non_json(queue: psyq.Queue) -> None:
    job = await queue.add("a", {"v": 1})
    with pytest.raises(psyq.InvalidDataError):
        await job.update_data({"v": object()})
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.data == {"v": 1}


async def test_change_priority_of_waiting_job(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    await job.change_priority(priority=3)
    assert await job.get_state() == "prioritized"
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.priority == 3


async def test_change_priority_to_zero_makes_it_waiting(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, priority=4)
    await job.change_priority(priority=0)
    assert await job.get_state() == "waiting"


async def test_change_priority_reorders(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    first = await queue.add("first", None, priority=5)
    second = await queue.add("second", None, priority=5)
    await second.change_priority(priority=1)
    worker = make_worker(None)
    taken = await worker.get_next_job("t", block=False)
    assert taken is not None
    assert taken.id == second.id
    assert first.id != taken.id


async def test_change_priority_rejects_bad_value(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    with pytest.raises(psyq.InvalidOptionsError, match="priority"):
        await job.change_priority(priority=-1)


async def test_change_delay_keeps_job_delayed(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, delay=60_000)
    await job.change_delay(120_000)
    assert await job.get_state() == "delayed"
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.delay == 120_000


async def test_change_delay_shorter_makes_it_due(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, delay=60_000)
    await job.change_delay(10)
    make_worker(lambda job: "due")
    await wait_state(queue, job.id, "completed")


async def test_change_delay_of_waiting_job_is_refused(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    with pytest.raises(psyq.JobStateError):
        await job.change_delay(1000)


async def test_promote_delayed_job(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, delay=60_000)
    await job.promote()
    assert await job.get_state() == "waiting"


async def test_promote_delayed_prioritized_job(queue: psyq.Queue) -> None:
    job = await queue.add("a", None, delay=60_000, priority=2)
    await job.promote()
    assert await job.get_state() == "prioritized"


async def test_promote_waiting_job_is_refused(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    with pytest.raises(psyq.JobStateError):
        await job.promote()


async def test_retry_failed_job(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    fail = True

    async def process(job: psyq.Job) -> str:
        if fail:
            raise RuntimeError("first time")
        return "second time"

    job = await queue.add("a")
    make_worker(process)
    await wait_state(queue, job.id, "failed")
    fail = False
    failed = await queue.get_job(job.id)
    assert failed is not None
    await failed.retry()
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "second time"
    assert done.failed_reason is None


@pytest.mark.parametrize("reset", [False, True], ids=["kept", "reset"])
async def test_retry_keeps_the_attempt_counters_unless_reset(
    queue: psyq.Queue, make_worker: WorkerFactory, reset: bool
) -> None:
    """As BullMQ's job.retry: attemptsMade and attemptsStarted stay (a job that used its
    attempts fails for good at its next failure), or go back to 0 when asked."""
    job = await queue.add("a", None, attempts=2)

    def process(job: psyq.Job) -> None:
        raise RuntimeError("always")

    worker = make_worker(process)
    await wait_state(queue, job.id, "failed")
    await worker.close()
    failed = await queue.get_job(job.id)
    assert failed is not None and failed.attempts_made == 2
    await failed.retry(reset_attempts_made=reset, reset_attempts_started=reset)
    assert failed.attempts_made == (0 if reset else 2)
    stored = await queue.get_job(job.id)
    assert stored is not None and await stored.get_state() == "waiting"
    assert stored.attempts_made == (0 if reset else 2)
    assert stored.attempts_started == (0 if reset else 2)
    again = make_worker(process)
    await wait_state(queue, job.id, "failed")
    await again.close()
    done = await queue.get_job(job.id)
    assert done is not None and done.attempts_made == (2 if reset else 3)


async def test_retry_of_waiting_job_is_refused(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    with pytest.raises(psyq.JobStateError):
        await job.retry()


async def test_remove_job(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    await job.log("row")
    await job.remove()
    assert await queue.get_job(job.id) is None
    assert await job.get_state() == "unknown"
    assert await queue.count() == 0
    assert (await queue.get_job_logs(job.id))["count"] == 0


async def test_remove_active_job_is_refused(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    job = await queue.add("a")
    assert await make_worker(None).get_next_job("t", block=False) is not None
    with pytest.raises(psyq.JobStateError):
        await job.remove()
    assert await job.get_state() == "active"


async def test_refresh_reads_the_job_again(queue: psyq.Queue) -> None:
    job = await queue.add("a")
    await (await queue.get_job(job.id)).update_progress(7)  # type: ignore[union-attr]
    assert job.progress == 0
    assert (await job.refresh()).progress == 7


async def test_completed_listener_sees_the_same_job_fields(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", {"k": "v"})
    worker = make_worker(lambda job: None)
    [(seen, _)] = await Recorder(worker, "completed").wait("completed")
    assert (seen.id, seen.name, seen.data) == (job.id, "a", {"k": "v"})
