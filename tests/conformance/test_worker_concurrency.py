"""A Worker's concurrency changed while it runs, and what a QueueEvents reader says about an
obliterated queue's event history."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

import psyq
from tests.conformance.conftest import Recorder, WorkerFactory
from tests.polling import eventually


async def test_raising_concurrency_while_running_starts_more_jobs(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    running: set[str] = set()
    gate = asyncio.Event()

    async def process(job: psyq.Job) -> None:
        running.add(job.id)
        await gate.wait()

    worker = make_worker(process, concurrency=1)
    await queue.add_bulk([{"name": "job", "data": n} for n in range(4)])
    await eventually(lambda: len(running) == 1)
    worker.concurrency = 3
    await eventually(lambda: len(running) == 3)
    gate.set()
    await eventually(lambda: _completed(queue, 4))


async def test_lowering_concurrency_while_running_lets_the_busy_jobs_finish(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    running: set[str] = set()
    gate = asyncio.Event()
    most_after = 0

    async def process(job: psyq.Job) -> None:
        nonlocal most_after
        running.add(job.id)
        if gate.is_set():
            most_after = max(most_after, len(running))
        await gate.wait()
        await asyncio.sleep(0.005)  # sleep: the job's work
        running.discard(job.id)

    worker = make_worker(process, concurrency=3)
    await queue.add_bulk([{"name": "job", "data": n} for n in range(8)])
    await eventually(lambda: len(running) == 3)
    worker.concurrency = 1
    gate.set()  # the three busy ones finish; then one job at a time
    await eventually(lambda: _completed(queue, 8))
    assert most_after == 1
    assert worker.concurrency == 1


@pytest.mark.parametrize("value", [0, -2, 2.5, "3", None, True])
async def test_a_bad_concurrency_is_refused_naming_it(
    make_worker: WorkerFactory, value: Any
) -> None:
    worker = make_worker(lambda job: None, concurrency=2, autorun=False)
    with pytest.raises(psyq.InvalidOptionsError, match="'concurrency'") as raised:
        worker.concurrency = value
    assert repr(value) in str(raised.value)
    assert worker.concurrency == 2


async def _completed(queue: psyq.Queue, count: int) -> bool:
    return (await queue.get_job_counts("completed"))["completed"] == count


async def test_a_reader_does_not_call_an_obliterated_queue_a_restart(
    queue: psyq.Queue, queue_events: psyq.QueueEvents, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="psyq")
    seen = Recorder(queue_events, "waiting")
    await queue.add("before", {})
    [(_, seen_id)] = await seen.wait("waiting")
    await queue.obliterate()
    # On Redis the obliterate deletes the events stream, as BullMQ's does, and a new stream's
    # ids start again at the current millisecond: events of the millisecond of the last one
    # the reader saw would sort below it (docs/backends.md). The next add comes after it.
    seen_ms = int(str(seen_id).partition("-")[0])
    await eventually(lambda: time.time() * 1000 > seen_ms + 1, "the next millisecond")
    job = await queue.add("after", {})
    [_, (args, _event_id)] = await seen.wait("waiting", 2)
    assert args["jobId"] == job.id
    assert not [r.getMessage() for r in caplog.records if "started again" in r.getMessage()]
