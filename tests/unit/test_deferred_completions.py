"""Completions that wait for a call to ride on (a backend's `settle_linger_ms`; Postgres
sets one, tests/postgres/test_deferred_completions.py): the Worker's side, on memory://
told that it lingers. A completion made while the worker's last take found no other job
waiting does not get a call of its own: it goes with the take the next job's arrival
starts, and a close during that take lets it end instead of cancelling it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psyq
from psyq.backends.base import FetchRequest, JobRecord, Settlement
from psyq.backends.engine.memory import MemoryBackend
from psyq.errors import PsyqError
from tests.polling import eventually


class LingeringBackend(MemoryBackend):
    """memory://, batching and lingering as a store across the network would; it records
    each settle_many call as (completions carried, whether it also took), and can make the
    calls that take slow."""

    batch_settles = True
    settle_linger_ms = 5_000  # far beyond the tests: a completion settled sooner rode on a take

    def __init__(self, take_delay: float = 0.0) -> None:
        super().__init__("memory://deferred-test")
        self.calls: list[tuple[int, bool]] = []
        self.take_delay = take_delay

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        takes = fetch is not None and bool(fetch.tokens)
        self.calls.append((len(settlements), takes))
        if takes and self.take_delay:
            await asyncio.sleep(self.take_delay)  # sleep: a take slow across the network
        return await super().settle_many(queue, settlements, fetch)


class Watched:
    def __init__(self, worker: psyq.Worker) -> None:
        self.worker = worker
        self.started: set[str] = set()
        self.completed: list[str] = []
        self.errors: list[BaseException] = []
        worker.on("active", lambda job, prev: self.started.add(job.id))
        worker.on("completed", lambda job, result: self.completed.append(job.id))
        worker.on("error", self.errors.append)

    async def until_started(self, job_id: str) -> None:
        """Until the job's processor has returned (its completion settled, or deferred:
        waiting to ride on a call) and the worker's fetcher waits for the next job."""

        def ran_and_waiting() -> bool:
            settler, takes = self.worker._settler, self.worker._takes
            finished = job_id in self.completed or settler.deferred(job_id)
            return finished and takes.drained

        await eventually(ran_and_waiting, f"job {job_id} run, the worker waiting for the next")


async def noop(job: psyq.Job) -> None:
    return None


async def test_each_completion_rides_on_the_next_jobs_take() -> None:
    backend = LingeringBackend()
    queue = psyq.Queue("trickle", connection=backend)
    worker = psyq.Worker("trickle", noop, connection=backend, concurrency=4)
    seen = Watched(worker)
    ids = []
    for n in range(10):
        job = await queue.add("x", {"n": n})
        ids.append(job.id)
        await seen.until_started(job.id)
    assert seen.completed == ids[:-1]  # each settled by the take of the job after it
    carried = [n for n, takes in backend.calls if n and takes]
    assert sum(carried) == 9 and all(n == 1 for n in carried)
    assert not [n for n, takes in backend.calls if n and not takes]  # none went alone
    await worker.close()  # the last one waits no longer than the close
    assert seen.completed == ids and seen.errors == []
    assert await queue.get_job_counts("completed", "active") == {"completed": 10, "active": 0}
    await queue.close()


async def test_a_close_during_a_take_carrying_completions_lets_it_end() -> None:
    backend = LingeringBackend(take_delay=0.5)
    queue = psyq.Queue("closing", connection=backend)
    worker = psyq.Worker("closing", noop, connection=backend, concurrency=4)
    seen = Watched(worker)
    first = await queue.add("x", {})
    await seen.until_started(first.id)
    second = await queue.add("x", {})  # its take carries the first's completion, slowly
    await eventually(lambda: (1, True) in backend.calls, "the take carrying the completion")
    await asyncio.wait_for(worker.close(), 5)
    assert seen.errors == []  # the take was not cancelled under its completions
    assert sorted(seen.completed) == sorted([first.id, second.id])
    assert await queue.get_job_counts("completed", "active", "waiting") == {
        "completed": 2,
        "active": 0,
        "waiting": 0,
    }
    await queue.close()
