"""The events psyq.compat.bullmq's Queue and Worker emit in their own process, as Node
BullMQ 6's do (their listener interfaces, QueueListener and WorkerListener, and what its
classes emit: which event, when, with which arguments), on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from psyq.compat.bullmq import Job, Queue, Worker
from tests.conformance.conftest import Recorder
from tests.polling import eventually


@pytest.fixture
async def queue(opts: dict[str, str], queue_name: str) -> AsyncIterator[Queue]:
    queue = Queue(queue_name, opts)
    yield queue
    await queue.close()


# ---------------------------------------------------------------------- Queue
async def test_queue_pause_and_resume_emit_paused_and_resumed(queue: Queue) -> None:
    rec = Recorder(queue, "paused", "resumed")
    await queue.pause()
    assert rec.events == {"paused": [()], "resumed": []}
    await queue.resume()
    assert rec.events == {"paused": [()], "resumed": [()]}


async def test_queue_remove_emits_removed_with_the_id_only_when_it_removed(
    queue: Queue,
) -> None:
    rec = Recorder(queue, "removed")
    job = await queue.add("x", {})
    assert await queue.remove(str(job.id)) == 1
    assert await queue.remove("no-such-job") == 0
    assert rec.events["removed"] == [(str(job.id),)]


async def test_job_remove_emits_removed_with_the_job_on_its_queue(queue: Queue) -> None:
    rec = Recorder(queue, "removed")
    job = await queue.add("x", {})
    await job.remove()
    assert rec.events["removed"] == [(job,)]


async def test_queue_clean_emits_cleaned_with_the_ids_and_nodes_state_name(
    queue: Queue,
) -> None:
    """One `cleaned(ids, type)` per call, even when it removed none; `waiting` is named
    `wait` as Node normalises it."""
    rec = Recorder(queue, "cleaned")
    added = {str((await queue.add("x", {})).id) for _ in range(2)}
    cleaned: set[str] = set()
    calls = 0

    async def all_cleaned() -> bool:
        nonlocal calls
        calls += 1
        cleaned.update(await queue.clean(0, 0, "waiting"))
        return cleaned == added

    await eventually(all_cleaned)
    assert len(rec.events["cleaned"]) == calls
    assert {job_id for ids, _ in rec.events["cleaned"] for job_id in ids} == added
    assert {kind for _, kind in rec.events["cleaned"]} == {"wait"}


async def test_queue_progress_events_as_node(queue: Queue) -> None:
    """`queue.updateJobProgress(id, p)` emits `progress(jobId, p)`; a queue's job's own
    `updateProgress(p)` emits `progress(job, p)` on its queue."""
    rec = Recorder(queue, "progress")
    job = await queue.add("x", {})
    await queue.updateJobProgress(str(job.id), 42)
    await job.updateProgress({"step": 2})
    assert rec.events["progress"] == [(str(job.id), 42), (job, {"step": 2})]
    assert (await queue.getJob(str(job.id))).progress == {"step": 2}  # type: ignore[union-attr]


# ---------------------------------------------------------------------- rate limit ttl
async def test_get_rate_limit_ttl_answers_as_node_on_redis(queue: Queue) -> None:
    """Node's getRateLimitTtl: -2 with no limit and no `maxJobs`; 0 with `maxJobs` (or a
    global rate limit) not reached; the ttl while the queue is rate-limited."""
    assert await queue.getRateLimitTtl() == -2
    assert await queue.getRateLimitTtl(5) == 0
    await queue.rateLimit(60_000)
    assert 0 < await queue.getRateLimitTtl() <= 60_000
    assert 0 < await queue.getRateLimitTtl(1) <= 60_000
    assert await queue.removeRateLimitKey() == 1
    assert await queue.getRateLimitTtl() == -2
    await queue.setGlobalRateLimit(10, 1000)
    assert await queue.getRateLimitTtl() == 0


# ---------------------------------------------------------------------- Worker
async def _idle(job: Job, token: str) -> None:
    return None


async def test_worker_emits_ready_once_its_connection_is_open(
    opts: dict[str, str], queue_name: str
) -> None:
    worker = Worker(queue_name, _idle, opts)
    rec = Recorder(worker, "ready")
    try:
        await rec.wait("ready")
        assert rec.events["ready"] == [()]
    finally:
        await worker.close()


async def test_worker_close_emits_closing_then_closed_once(
    opts: dict[str, str], queue_name: str
) -> None:
    worker = Worker(queue_name, _idle, opts)
    order: list[tuple[str, tuple[Any, ...]]] = []
    for event in ("closing", "closed"):
        worker.on(event, lambda *args, event=event: order.append((event, args)))
    await asyncio.gather(worker.close(), worker.close())
    await worker.close()
    assert order == [("closing", ("closing queue",)), ("closed", ())]
    assert worker.closed


async def test_worker_emits_drained_each_time_the_queue_runs_dry(
    opts: dict[str, str], queue_name: str, queue: Queue
) -> None:
    worker = Worker(queue_name, _idle, {**opts, "drainDelay": 1})
    rec = Recorder(worker, "drained", "completed")
    try:
        await rec.wait("drained")
        await queue.add("x", {})
        await rec.wait("completed")
        await rec.wait("drained", count=2)
        assert set(rec.events["drained"]) == {()}
    finally:
        await worker.close()


async def test_worker_emits_locks_renewed_with_the_renewed_jobs(
    opts: dict[str, str], queue_name: str, queue: Queue
) -> None:
    renewed = asyncio.Event()

    async def hold(job: Job, token: str) -> None:
        await renewed.wait()

    worker = Worker(queue_name, hold, {**opts, "lockDuration": 1000})
    rec = Recorder(worker, "locksRenewed")
    worker.on("locksRenewed", lambda data: renewed.set())
    try:
        job = await queue.add("x", {})
        await rec.wait("locksRenewed", timeout=10)
        assert rec.events["locksRenewed"][0] == ({"count": 1, "jobIds": [str(job.id)]},)
    finally:
        renewed.set()
        await worker.close()


async def test_worker_stalled_gives_prev_to_a_listener_that_names_it(
    opts: dict[str, str], queue_name: str, queue: Queue
) -> None:
    """Node's `stalled(jobId, prev)`: a two-parameter listener gets `prev` ("active"); the
    Python package's one-parameter form still gets the id alone."""
    started = asyncio.Event()

    async def hang(job: Job, token: str) -> None:
        started.set()
        await asyncio.Event().wait()

    first = Worker(queue_name, hang, {**opts, "lockDuration": 500})
    job = await queue.add("stuck", {})
    await asyncio.wait_for(started.wait(), 10)
    await first.close(force=True)
    node_form: list[tuple[str, str]] = []
    package_form: list[str] = []
    options = {**opts, "lockDuration": 500, "stalledInterval": 300}
    second = Worker(queue_name, _idle, options)
    second.on("stalled", lambda job_id, prev: node_form.append((job_id, prev)))
    second.on("stalled", lambda job_id: package_form.append(job_id))
    try:
        await eventually(lambda: node_form and package_form, timeout=10)
        assert node_form[0] == (str(job.id), "active") and package_form[0] == str(job.id)
    finally:
        await second.close()
