"""A worker run to the end of a queue's jobs, for tests that inject faults under it: what
the worker reported, and the state and start count each job was left with."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psyq
from psyq.backends.base import BackendAdapter
from tests.polling import eventually


@dataclass
class WorkerRun:
    completed: list[str] = field(default_factory=list)  # ids, in `completed` order
    errors: list[BaseException] = field(default_factory=list)  # `error` events
    states: dict[str, str] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)  # attempts_started per job
    statistics: dict[str, int] = field(default_factory=dict)  # Worker.statistics() at close


async def run_each_job(
    queue: psyq.Queue,
    backend: BackendAdapter,
    process: Callable[[psyq.Job], Awaitable[Any]],
    jobs: Sequence[psyq.Job],
    concurrency: int,
    lock_ms: int,
) -> WorkerRun:
    """Run a worker (locks of `lock_ms`, stall checks as seldom) until every job of `jobs`
    completed or 20 s passed, close it, and read the jobs back."""
    run = WorkerRun()
    worker = psyq.Worker(
        queue.name,
        process,
        connection=backend,
        concurrency=concurrency,
        lock_duration=lock_ms,
        stalled_interval=lock_ms,
        drain_delay=0.2,
    )
    worker.on("completed", lambda job, result: run.completed.append(job.id))
    worker.on("error", run.errors.append)
    try:
        with contextlib.suppress(AssertionError):  # the caller asserts on the states
            await eventually(lambda: len(run.completed) >= len(jobs), "every job completed", 20)
    finally:
        await worker.close()
    run.statistics = worker.statistics()
    for job in jobs:
        run.states[job.id] = await queue.get_job_state(job.id)
        stored = await queue.get_job(job.id)
        run.started[job.id] = stored.attempts_started if stored is not None else -1
    return run
