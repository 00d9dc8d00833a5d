"""Settle batching: a worker on a backend with `batch_settles` completes the jobs of one
event-loop turn with one `settle_many` call, and every job still completes exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import psyq
from psyq.backends.base import FetchRequest, JobRecord, Settlement
from psyq.backends.engine.memory import MemoryBackend
from psyq.errors import PsyqError


class CountingBackend(MemoryBackend):
    """memory://, told that batching pays, counting the batches it gets."""

    batch_settles = True

    def __init__(self) -> None:
        super().__init__("memory://settle-batch-test")
        self.batches: list[int] = []

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        self.batches.append(len(settlements))
        return await super().settle_many(queue, settlements, fetch)


async def test_completions_of_one_turn_share_one_call() -> None:
    backend = CountingBackend()
    queue = psyq.Queue("batched", connection=backend)
    await queue.add_bulk([{"name": "x", "data": {"i": i}} for i in range(200)])
    done: list[str] = []
    finished = asyncio.Event()

    async def work(job: psyq.Job) -> int:
        await asyncio.sleep(0)
        return int(job.data["i"])

    def completed(job: psyq.Job, result: int) -> None:
        done.append(job.id)
        if len(done) == 200:
            finished.set()

    worker = psyq.Worker("batched", work, connection=backend, concurrency=20)
    worker.on("completed", completed)
    await asyncio.wait_for(finished.wait(), 10)
    await worker.close()
    assert sorted(done) == sorted(set(done)) and len(done) == 200
    assert await queue.get_job_counts("completed", "active") == {"completed": 200, "active": 0}
    assert sum(backend.batches) == 200
    assert max(backend.batches) > 1  # several slots settled in one call
    await queue.obliterate(force=True)
    await queue.close()
