"""bullmq for Python (PyPI `bullmq`) side of bench/run.py: the same workloads on the same server.

Run by bench/run.py in its own virtualenv (bench/peers/bullmq-py/.venv, made on first use
from requirements.txt):

    python bench.py '<config JSON>'   with REDIS_URL set (Redis backend), or with
    PEER_STORE=postgres and PSYQ_BENCH_PG_DSN set (bullmq's Postgres backend, bullmq >= 3)

On Redis every key goes under a fresh prefix (deleted with SCAN + DEL at the end); on
Postgres the tables go to a fresh schema (dropped at the end). Prints one JSON line.
Rows: add one by one = `Queue.add`; add_bulk = `Queue.addBulk` of 1,000; processing cN = a
`Worker` (async no-op processor, concurrency N), time until the Nth `completed` event;
add-to-start = `Queue.add` at a steady rate while a Worker (concurrency 10) runs; flows =
`FlowProducer.addBulk` of 100 trees (1 parent + 10 children), then two Workers
(concurrency 100) until the 1,000th parent completes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bullmq import FlowProducer, Queue, Worker
from peerlib import (
    Countdown,
    config,
    delete_matching,
    emit,
    log,
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

RUN = run_id("bullmqpy").replace("-", "_")
ON_POSTGRES = os.environ.get("PEER_STORE") == "postgres"


def base_opts() -> dict[str, Any]:
    """Queue/Worker options for this run: the server, and a fresh prefix or schema."""
    if ON_POSTGRES:
        dsn = os.environ["PSYQ_BENCH_PG_DSN"]
        return {"backend": "postgres", "connection": dsn, "schema": RUN}
    return {"connection": os.environ["REDIS_URL"], "prefix": RUN}


class Queues:
    """The queues this run opened, closed at the end."""

    def __init__(self) -> None:
        self.opened: list[Queue] = []
        self.serial = 0

    def fresh_name(self, label: str) -> str:
        self.serial += 1
        return f"{label}-{self.serial}"

    def open(self, name: str) -> Queue:
        queue = Queue(name, base_opts())
        self.opened.append(queue)
        return queue

    async def close_all(self) -> None:
        for queue in self.opened:
            await queue.close()


async def noop(job: Any, token: str) -> None:
    return None


async def close_worker(worker: Worker) -> None:
    """Close a worker; force it if a graceful close hangs (it did once here, intermittently)."""
    try:
        await asyncio.wait_for(worker.close(), 30)
    except TimeoutError:
        log("worker close timed out; forcing it")
        await worker.close(force=True)


async def add_bulk_to(queue: Queue, indexes: range) -> None:
    await queue.addBulk([{"name": "x", "data": {"i": i}} for i in indexes])


async def add_single(queues: Queues, count: int) -> float:
    queue = queues.open(queues.fresh_name("single"))
    return await timed_loop(count, lambda i: queue.add("x", {"i": i}))


async def add_bulk(queues: Queues, count: int) -> float:
    queue = queues.open(queues.fresh_name("bulk"))
    return await timed_batches(count, lambda indexes: add_bulk_to(queue, indexes))


async def processing(queues: Queues, count: int, concurrency: int) -> float:
    name = queues.fresh_name(f"c{concurrency}")
    queue = queues.open(name)
    await timed_batches(count, lambda indexes: add_bulk_to(queue, indexes))
    countdown = Countdown(count)
    started = time.perf_counter()
    worker = Worker(name, noop, {**base_opts(), "concurrency": concurrency})
    worker.on("completed", countdown.hit)
    await countdown.done.wait()
    rate = per_second(count, started)
    await close_worker(worker)
    return rate


async def latency(queues: Queues, rate: int, seconds: float) -> dict[str, float]:
    name = queues.fresh_name("latency")
    queue = queues.open(name)
    samples: list[float] = []

    async def record(job: Any, token: str) -> None:
        samples.append(time.perf_counter() - job.data["t"])

    worker = Worker(name, record, {**base_opts(), "concurrency": 10})
    await asyncio.sleep(0.5)  # let the worker connect and block on the queue
    total = await steady_adds(rate, seconds, lambda: queue.add("x", {"t": time.perf_counter()}))
    await wait_for_samples(samples, total)
    await close_worker(worker)
    return percentiles_ms(samples)


def flow_tree(parents: str, children: str, i: int) -> dict[str, Any]:
    kids = [{"name": "child", "queueName": children, "data": {"k": k}} for k in range(10)]
    return {"name": "parent", "queueName": parents, "data": {"i": i}, "children": kids}


async def flows(queues: Queues, trees: int) -> dict[str, float]:
    parents, children = queues.fresh_name("parents"), queues.fresh_name("children")
    producer = FlowProducer(base_opts())
    started = time.perf_counter()
    for start in range(0, trees, 100):
        await producer.addBulk(
            [flow_tree(parents, children, i) for i in range(start, min(trees, start + 100))]
        )
    added = per_second(trees, started)
    await producer.close()
    countdown = Countdown(trees)
    started = time.perf_counter()
    kids = Worker(children, noop, {**base_opts(), "concurrency": 100})
    tops = Worker(parents, noop, {**base_opts(), "concurrency": 100})
    tops.on("completed", countdown.hit)
    await countdown.done.wait()
    processed = per_second(trees, started)
    await close_worker(kids)
    await close_worker(tops)
    return {"added": added, "processed": processed}


async def bytes_per_waiting_job(queues: Queues, count: int) -> float:
    """Growth of the Redis server's used_memory per waiting job."""
    queue = queues.open(queues.fresh_name("memory"))
    redis = queue.backend.connection.conn
    before = await used_memory(redis)
    await timed_batches(count, lambda indexes: add_bulk_to(queue, indexes))
    return (await used_memory(redis) - before) / count


async def clean_up(queues: Queues) -> None:
    """Remove everything this run stored: its Redis prefix or its Postgres schema."""
    if ON_POSTGRES:
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            os.environ["PSYQ_BENCH_PG_DSN"], autocommit=True
        ) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{RUN}" CASCADE')
    else:
        await delete_matching(queues.opened[0].backend.connection.conn, f"{RUN}:*")
    await queues.close_all()


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    queues = Queues()
    try:
        figures: dict[str, Any] = {
            "version": version("bullmq") + (" (Postgres backend)" if ON_POSTGRES else ""),
            "add_single": await step("add_single", add_single(queues, cfg["single"])),
            "add_bulk": await step("add_bulk", add_bulk(queues, cfg["jobs"])),
            "c10": await step("c10", processing(queues, cfg["jobs"], 10)),
            "c100": await step("c100", processing(queues, cfg["jobs"], 100)),
            "latency": await step("latency", latency(queues, cfg["rate"], cfg["seconds"])),
            "flows": await step("flows", flows(queues, cfg["trees"])),
            "notes": [],
        }
        if not ON_POSTGRES:
            figures["bytes_per_waiting_job"] = await step(
                "memory", bytes_per_waiting_job(queues, cfg["memoryJobs"])
            )
        return figures
    finally:
        await clean_up(queues)


if __name__ == "__main__":
    emit(asyncio.run(main(config())))
