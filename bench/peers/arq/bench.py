"""arq (PyPI `arq`) side of bench/run.py: the same workloads on the same Redis server.

Run by bench/run.py in its own virtualenv (bench/peers/arq/.venv, made on first use from
requirements.txt):  python bench.py '<config JSON>'  with REDIS_URL set.
arq's job keys are global (arq:job:<id>, arq:result:<id>, ...), so every job of this run
gets an id that contains the run's name, and every queue a fresh name; the keys matching
the run's name are deleted with SCAN + DEL at the end. Prints one JSON line.
Rows: add one by one = `ArqRedis.enqueue_job`; add_bulk = arq has no bulk add:
`asyncio.gather` of 1,000 `enqueue_job` calls per batch; processing cN = a `Worker` (async
no-op function, `max_jobs` N, arq's defaults otherwise: it polls the queue every 0.5 s and
reads up to max(5N, 100) ids per poll), time until the Nth job has ended and its result is
recorded (the `after_job_end` hook); add-to-start = `enqueue_job` at a steady rate while a
Worker (max_jobs 10) runs. arq has no flows.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Worker, func
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

RUN = run_id("arq")
JOB_IDS = itertools.count()
NOTES = [
    "arq add_bulk: no bulk add in arq; asyncio.gather of 1,000 enqueue_job calls per batch",
    "arq workers poll (default poll_delay 0.5 s): no blocking wait for new jobs",
    "arq flows: n/a (arq has no parent/child flows)",
]


def settings() -> RedisSettings:
    return RedisSettings.from_dsn(os.environ["REDIS_URL"])


def queue_name(label: str) -> str:
    return f"{RUN}-{label}"


async def enqueue(pool: ArqRedis, queue: str, function: str, **kwargs: Any) -> None:
    """One job on `queue`, with an id that carries the run's name (for the clean-up)."""
    job_id = f"{RUN}-{next(JOB_IDS)}"
    await pool.enqueue_job(function, _job_id=job_id, _queue_name=queue, **kwargs)


async def enqueue_batch(pool: ArqRedis, queue: str, indexes: range) -> None:
    await asyncio.gather(*(enqueue(pool, queue, "noop", i=i) for i in indexes))


async def noop(ctx: dict[str, Any], **kwargs: Any) -> None:
    return None


async def run_worker(worker: Worker, until: asyncio.Event) -> None:
    """Run `worker` (its own Redis pool) until `until` is set, then close it."""
    task = asyncio.create_task(worker.main())
    await until.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # close() gathers the job tasks that cancelling main() cancelled, and re-raises their
    # CancelledError: the run is over and measured by then.
    with contextlib.suppress(asyncio.CancelledError):
        await worker.close()


async def add_single(pool: ArqRedis, count: int) -> float:
    queue = queue_name("single")
    return await timed_loop(count, lambda i: enqueue(pool, queue, "noop", i=i))


async def add_bulk(pool: ArqRedis, count: int) -> float:
    queue = queue_name("bulk")
    return await timed_batches(count, lambda indexes: enqueue_batch(pool, queue, indexes))


async def processing(pool: ArqRedis, count: int, concurrency: int) -> float:
    queue = queue_name(f"c{concurrency}")
    await timed_batches(count, lambda indexes: enqueue_batch(pool, queue, indexes))
    countdown = Countdown(count)

    async def finished(ctx: dict[str, Any]) -> None:
        countdown.hit()

    started = time.perf_counter()
    worker = Worker(
        functions=[func(noop, name="noop")],
        queue_name=queue,
        redis_settings=settings(),
        max_jobs=concurrency,
        after_job_end=finished,
        handle_signals=False,
    )
    runner = asyncio.create_task(run_worker(worker, countdown.done))
    await countdown.done.wait()
    rate = per_second(count, started)
    await runner
    return rate


async def latency(pool: ArqRedis, rate: int, seconds: float) -> dict[str, float]:
    queue = queue_name("latency")
    samples: list[float] = []

    async def record(ctx: dict[str, Any], t: float) -> None:
        samples.append(time.perf_counter() - t)

    worker = Worker(
        functions=[func(record, name="record")],
        queue_name=queue,
        redis_settings=settings(),
        max_jobs=10,
        handle_signals=False,
    )
    stop = asyncio.Event()
    runner = asyncio.create_task(run_worker(worker, stop))
    await asyncio.sleep(0.5)  # let the worker start polling
    total = await steady_adds(
        rate, seconds, lambda: enqueue(pool, queue, "record", t=time.perf_counter())
    )
    await wait_for_samples(samples, total)
    stop.set()
    await runner
    return percentiles_ms(samples)


async def bytes_per_waiting_job(pool: ArqRedis, count: int) -> float:
    """Growth of the Redis server's used_memory per waiting job."""
    queue = queue_name("memory")
    before = await used_memory(pool)
    await timed_batches(count, lambda indexes: enqueue_batch(pool, queue, indexes))
    return (await used_memory(pool) - before) / count


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    pool = await create_pool(settings())
    try:
        return {
            "version": version("arq"),
            "add_single": await step("add_single", add_single(pool, cfg["single"])),
            "add_bulk": await step("add_bulk", add_bulk(pool, cfg["jobs"])),
            "c10": await step("c10", processing(pool, cfg["jobs"], 10)),
            "c100": await step("c100", processing(pool, cfg["jobs"], 100)),
            "latency": await step("latency", latency(pool, cfg["rate"], cfg["seconds"])),
            "bytes_per_waiting_job": await step(
                "memory", bytes_per_waiting_job(pool, cfg["memoryJobs"])
            ),
            "notes": NOTES,
        }
    finally:
        await delete_matching(pool, f"*{RUN}*")
        await pool.aclose()


if __name__ == "__main__":
    emit(asyncio.run(main(config())))
