"""SAQ (PyPI `saq`) side of bench/run.py: the same workloads on the same Redis server.

Run by bench/run.py in its own virtualenv (bench/peers/saq/.venv, made on first use from
requirements.txt):  python bench.py '<config JSON>'  with REDIS_URL set.
Every queue of this run has a fresh name; its keys (saq:<name>:*, saq:job:<name>:*) are
deleted with SCAN + DEL at the end. Prints one JSON line.
Rows: add one by one = `Queue.enqueue`; add_bulk = SAQ has no bulk add: `asyncio.gather` of
1,000 `enqueue` calls per batch (SAQ itself keeps at most 20 in flight per queue);
processing cN = a `Worker` (async no-op function, concurrency N), time until the Nth job
has finished (its `after_process` hook, which runs once the job is marked complete);
add-to-start = `enqueue` at a steady rate while a Worker (concurrency 10) runs. SAQ has no
flows (parent/child trees).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peerlib import (
    Countdown,
    config,
    delete_matching,
    emit,
    per_second,
    percentiles_ms,
    run_id,
    steady_adds,
    step,
    timed_batches,
    timed_loop,
    used_memory,
    wait_for_samples,
)
from saq import Queue, Worker

RUN = run_id("saq")
NOTES = [
    "saq add_bulk: no bulk add in SAQ; asyncio.gather of 1,000 enqueue calls per batch",
    "saq flows: n/a (SAQ has no parent/child flows)",
]


class Queues:
    """The queues this run opened (fresh names), disconnected at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opened: list[Queue] = []

    async def open(self, label: str) -> Queue:
        queue = Queue.from_url(self.url, name=f"{RUN}-{label}")
        await queue.connect()
        self.opened.append(queue)
        return queue

    async def close_all(self) -> None:
        for queue in self.opened:
            await queue.disconnect()


async def noop(ctx: dict[str, Any], **kwargs: Any) -> None:
    return None


async def enqueue_batch(queue: Queue, indexes: range) -> None:
    await asyncio.gather(*(queue.enqueue("noop", i=i) for i in indexes))


async def run_worker(worker: Worker, until: asyncio.Event) -> None:
    """Run `worker` until `until` is set, then stop it."""
    task = asyncio.create_task(worker.start())
    await until.wait()
    await worker.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def add_single(queues: Queues, count: int) -> float:
    queue = await queues.open("single")
    return await timed_loop(count, lambda i: queue.enqueue("noop", i=i))


async def add_bulk(queues: Queues, count: int) -> float:
    queue = await queues.open("bulk")
    return await timed_batches(count, lambda indexes: enqueue_batch(queue, indexes))


async def processing(queues: Queues, count: int, concurrency: int) -> float:
    queue = await queues.open(f"c{concurrency}")
    await timed_batches(count, lambda indexes: enqueue_batch(queue, indexes))
    countdown = Countdown(count)

    async def finished(ctx: dict[str, Any]) -> None:
        countdown.hit()

    started = time.perf_counter()
    worker = Worker(queue, [noop], concurrency=concurrency, after_process=finished)
    runner = asyncio.create_task(run_worker(worker, countdown.done))
    await countdown.done.wait()
    rate = per_second(count, started)
    await runner
    return rate


async def latency(queues: Queues, rate: int, seconds: float) -> dict[str, float]:
    queue = await queues.open("latency")
    samples: list[float] = []

    async def record(ctx: dict[str, Any], t: float) -> None:
        samples.append(time.perf_counter() - t)

    stop = asyncio.Event()
    runner = asyncio.create_task(
        run_worker(Worker(queue, [("record", record)], concurrency=10), stop)
    )
    await asyncio.sleep(0.5)  # let the worker start and block on the queue
    total = await steady_adds(rate, seconds, lambda: queue.enqueue("record", t=time.perf_counter()))
    await wait_for_samples(samples, total)
    stop.set()
    await runner
    return percentiles_ms(samples)


async def bytes_per_waiting_job(queues: Queues, count: int) -> float:
    """Growth of the Redis server's used_memory per waiting job."""
    queue = await queues.open("memory")
    before = await used_memory(queue.redis)
    await timed_batches(count, lambda indexes: enqueue_batch(queue, indexes))
    return (await used_memory(queue.redis) - before) / count


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    queues = Queues(os.environ["REDIS_URL"])
    try:
        return {
            "version": version("saq"),
            "add_single": await step("add_single", add_single(queues, cfg["single"])),
            "add_bulk": await step("add_bulk", add_bulk(queues, cfg["jobs"])),
            "c10": await step("c10", processing(queues, cfg["jobs"], 10)),
            "c100": await step("c100", processing(queues, cfg["jobs"], 100)),
            "latency": await step("latency", latency(queues, cfg["rate"], cfg["seconds"])),
            "bytes_per_waiting_job": await step(
                "memory", bytes_per_waiting_job(queues, cfg["memoryJobs"])
            ),
            "notes": NOTES,
        }
    finally:
        if queues.opened:
            await delete_matching(queues.opened[0].redis, f"saq:*{RUN}*")
        await queues.close_all()


if __name__ == "__main__":
    emit(asyncio.run(main(config())))
