"""The Worker: processing, results, concurrency, processor shapes, events, running modes."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import psyq
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state


async def test_worker_completes_job_and_stores_returnvalue(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    async def process(job: psyq.Job) -> dict[str, Any]:
        return {"sent": job.data["to"]}

    job = await queue.add("send", {"to": "a@b.c"})
    make_worker(process)
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == {"sent": "a@b.c"}
    assert done.attempts_made == 1
    assert done.processed_on is not None
    assert done.finished_on is not None
    assert done.finished_on >= done.processed_on
    assert done.failed_reason is None


async def test_worker_fails_job_with_reason(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    async def process(job: psyq.Job) -> None:
        raise ValueError("boom")

    job = await queue.add("send")
    make_worker(process)
    await wait_state(queue, job.id, "failed")
    failed = await queue.get_job(job.id)
    assert failed is not None
    assert failed.failed_reason == "boom"
    assert failed.attempts_made == 1
    assert failed.finished_on is not None


async def test_non_json_returnvalue_fails_the_job(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("send")
    make_worker(lambda job: object())
    await wait_state(queue, job.id, "failed")


async def test_worker_processes_many_jobs(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await queue.add_bulk([{"name": "n", "data": i} for i in range(20)])
    worker = make_worker(lambda job: job.data * 2, concurrency=3)
    rec = Recorder(worker, "completed")
    calls = await rec.wait("completed", 20)
    assert sorted(result for _, result in calls) == [i * 2 for i in range(20)]
    assert (await queue.get_job_counts("completed"))["completed"] == 20


async def test_concurrency_runs_n_jobs_at_once(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    n = 4
    in_flight = 0
    most = 0
    all_in = asyncio.Event()

    async def process(job: psyq.Job) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if in_flight == n:
            all_in.set()
        try:
            await asyncio.wait_for(all_in.wait(), 5)
        finally:
            in_flight -= 1

    await queue.add_bulk([{"name": "n", "data": i} for i in range(n)])
    worker = make_worker(process, concurrency=n)
    rec = Recorder(worker, "completed", "failed")
    await rec.wait("completed", n)
    assert most == n
    assert rec.events["failed"] == []


async def test_concurrency_is_never_exceeded(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    in_flight = 0
    most = 0

    async def process(job: psyq.Job) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)  # sleep: the job's work
        in_flight -= 1

    await queue.add_bulk([{"name": "n", "data": i} for i in range(8)])
    worker = make_worker(process, concurrency=2)
    await Recorder(worker, "completed").wait("completed", 8)
    assert 1 <= most <= 2


async def test_plain_def_processor_runs_in_a_thread(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def process(job: psyq.Job) -> str:
        seen.append(threading.get_ident())
        return "sync"

    job = await queue.add("a")
    make_worker(process)
    await wait_state(queue, job.id, "completed")
    assert seen and seen[0] != loop_thread
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "sync"


async def test_async_processor_runs_on_the_loop(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    async def process(job: psyq.Job) -> None:
        seen.append(threading.get_ident())

    job = await queue.add("a")
    make_worker(process)
    await wait_state(queue, job.id, "completed")
    assert seen == [loop_thread]


async def test_processor_with_token_argument(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    tokens: list[Any] = []

    async def process(job: psyq.Job, token: str) -> None:
        tokens.append((token, job.token))

    job = await queue.add("a")
    make_worker(process)
    await wait_state(queue, job.id, "completed")
    [(token, job_token)] = tokens
    assert isinstance(token, str) and token
    assert token == job_token


async def test_sync_processor_with_token_argument(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    tokens: list[str] = []

    def process(job: psyq.Job, token: str) -> None:
        tokens.append(token)

    job = await queue.add("a")
    make_worker(process)
    await wait_state(queue, job.id, "completed")
    assert len(tokens) == 1 and tokens[0]


async def test_events_active_and_completed(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    job = await queue.add("a", 2)
    worker = make_worker(lambda job: job.data + 1, autorun=False)
    rec = Recorder(worker, "active", "completed")
    run = asyncio.create_task(worker.run())
    [(done_job, result)] = await rec.wait("completed")
    assert done_job.id == job.id
    assert result == 3
    assert rec.events["active"][0][0].id == job.id
    await worker.close()
    await run


async def test_failed_event_carries_the_error(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    async def process(job: psyq.Job) -> None:
        raise KeyError("missing")

    job = await queue.add("a")
    worker = make_worker(process)
    rec = Recorder(worker, "failed")
    [(failed_job, error)] = await rec.wait("failed")
    assert failed_job.id == job.id
    assert isinstance(error, KeyError)


async def test_progress_event(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    async def process(job: psyq.Job) -> None:
        await job.update_progress(42)

    job = await queue.add("a")
    worker = make_worker(process)
    rec = Recorder(worker, "progress")
    [(progress_job, value)] = await rec.wait("progress")
    assert progress_job.id == job.id
    assert value == 42


async def test_drained_event_when_queue_empties(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add("a")
    worker = make_worker(lambda job: None)
    rec = Recorder(worker, "completed", "drained")
    await rec.wait("completed")
    await rec.wait("drained")


async def test_error_event_when_a_listener_raises(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    problem = RuntimeError("listener broke")

    def bad_listener(job: psyq.Job, result: Any) -> None:
        raise problem

    await queue.add("a")
    worker = make_worker(lambda job: None)
    worker.on("completed", bad_listener)
    rec = Recorder(worker, "error")
    [(error,)] = await rec.wait("error")
    assert error is problem


async def test_closed_event(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    worker = make_worker(lambda job: None)
    rec = Recorder(worker, "closed")
    await worker.close()
    assert rec.events["closed"] == [()]


async def test_async_event_callbacks(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    seen: list[Any] = []
    done = asyncio.Event()

    async def on_completed(job: psyq.Job, result: Any) -> None:
        await asyncio.sleep(0)
        seen.append(result)
        done.set()

    await queue.add("a", "x")
    worker = make_worker(lambda job: job.data)
    worker.on("completed", on_completed)
    await asyncio.wait_for(done.wait(), 5)
    assert seen == ["x"]


async def test_autorun_false_waits_for_run(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    job = await queue.add("a")
    worker = make_worker(lambda job: "ran", autorun=False)
    assert not worker.is_running()
    assert await job.get_state() == "waiting"
    run = asyncio.create_task(worker.run())
    await wait_state(queue, job.id, "completed")
    assert worker.is_running()
    await worker.close()
    await asyncio.wait_for(run, 5)
    assert not worker.is_running()


async def test_worker_as_async_context_manager(backend_url: str, queue: psyq.Queue) -> None:
    job = await queue.add("a")
    async with psyq.Worker(queue.name, lambda job: "ctx", connection=backend_url) as worker:
        rec = Recorder(worker, "completed", "closed")
        await rec.wait("completed")
    assert rec.events["closed"] == [()]
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "ctx"


async def test_worker_takes_jobs_added_after_it_started(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    worker = make_worker(lambda job: job.data)
    rec = Recorder(worker, "completed")
    for i in range(3):
        await queue.add("late", i)
    await rec.wait("completed", 3)


async def test_bad_worker_options_are_rejected(backend_url: str, queue_name: str) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="concurrency"):
        psyq.Worker(queue_name, lambda job: None, connection=backend_url, concurrency=0)
    with pytest.raises(psyq.InvalidOptionsError):
        psyq.Worker(queue_name, "not callable", connection=backend_url)  # type: ignore[arg-type]


async def test_two_workers_share_a_queue_without_duplicates(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    seen: list[str] = []

    async def process(job: psyq.Job) -> None:
        seen.append(job.id)
        await asyncio.sleep(0)

    await queue.add_bulk([{"name": "n", "data": i} for i in range(30)])
    make_worker(process, concurrency=3)
    make_worker(process, concurrency=3)

    async def all_completed() -> bool:
        return (await queue.get_job_counts("completed"))["completed"] == 30

    await eventually(all_completed)
    assert len(seen) == len(set(seen)) == 30


def short_read_timeout(url: str) -> str:
    """`url` with its transport's own read timeout shorter than psyq's blocking reads
    where the store's client has one: redis-py's socket_timeout (5 s by default in
    redis-py 8), at 1 s so that a test need not idle 5 s to see it."""
    if not url.startswith(("redis://", "redis+cluster://", "rediss://")):
        return url
    return f"{url}{'&' if '?' in url else '?'}socket_timeout=1"


async def test_an_idle_worker_and_queue_events_report_no_error(
    queue_name: str, backend_url: str
) -> None:
    """Issue 41 (defect 4): a blocking read that outlasts the transport's read timeout is
    the transport's design, not a failure: an idle Worker (blocking on its queue's
    marker) and an idle QueueEvents (blocking on the feed) emit no `error`, and still
    see what comes after the idle time."""
    url = short_read_timeout(backend_url)
    worker = psyq.Worker(queue_name, lambda job: "ok", connection=url, drain_delay=2)
    events = psyq.QueueEvents(queue_name, connection=url, last_event_id="$")
    errors = {"worker": Recorder(worker, "error"), "queue_events": Recorder(events, "error")}
    completed = Recorder(events, "completed")
    try:
        await events.wait_until_ready()
        await asyncio.sleep(2.5)  # sleep: idle: the blocking reads outlast the 1 s read timeout
        async with psyq.Queue(queue_name, connection=url) as queue:
            await queue.add("after", {})
        await completed.wait("completed")
    finally:
        await worker.close()
        await events.close()
    assert {name: len(rec.events["error"]) for name, rec in errors.items()} == dict.fromkeys(
        errors, 0
    ), {name: rec.events["error"][:1] for name, rec in errors.items()}
