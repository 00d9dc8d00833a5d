"""procrastinate (PyPI `procrastinate`) side of bench/run.py: the same workloads on the same
Postgres server.

Run by bench/run.py in its own virtualenv (bench/peers/procrastinate/.venv, made on first
use from requirements.txt):  python bench.py '<config JSON>'  with PSYQ_BENCH_PG_DSN set.
procrastinate's schema lives in a dedicated database (CREATE DATABASE on the same server,
dropped at the end). Prints one JSON line.
Rows: add one by one = `defer_async` per job; add_bulk = `batch_defer_async` of 1,000;
processing cN = `run_worker_async(concurrency=N, wait=False)` (async no-op task), time until
the worker has run every job and returned; add-to-start = `defer_async` at a steady rate
while a worker (concurrency 10, LISTEN/NOTIFY on, the default) runs. The connection pool
holds at most 10 connections, like the pgqueuer peer and psyq's default. procrastinate has
no flows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from peerlib import (
    config,
    emit,
    per_second,
    percentiles_ms,
    steady_adds,
    step,
    timed_batches,
    timed_loop,
    wait_for_samples,
)
from procrastinate import App, PsycopgConnector
from psycopg.conninfo import make_conninfo

DATABASE = f"procrastinate_bench_{uuid.uuid4().hex[:8]}"
NOTES = ["procrastinate flows: n/a (no parent/child flows)"]
SAMPLES: list[float] = []


def make_app(dsn: str) -> App:
    connector = PsycopgConnector(conninfo=make_conninfo(dsn, dbname=DATABASE), max_size=10)
    app = App(connector=connector)

    @app.task(name="noop")
    async def noop(**kwargs: Any) -> None:
        return None

    @app.task(name="record")
    async def record(t: float) -> None:
        SAMPLES.append(time.perf_counter() - t)

    return app


@contextlib.asynccontextmanager
async def bench_database(dsn: str) -> Any:
    """A fresh database on the server of `dsn`, dropped afterwards."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{DATABASE}"')
        try:
            yield
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


async def defer_batch(app: App, queue: str, indexes: range) -> None:
    deferrer = app.tasks["noop"].configure(queue=queue)
    await deferrer.batch_defer_async(*({"i": i} for i in indexes))


async def drop_queue(app: App, queue: str) -> None:
    """Delete a queue's jobs (like psyq's obliterate after its add rows), so that later rows
    run on a table without unrelated waiting jobs."""
    query = "DELETE FROM procrastinate_jobs WHERE queue_name = %(queue)s"
    await app.connector.execute_query_async(query, queue=queue)


async def add_single(app: App, count: int) -> float:
    deferrer = app.tasks["noop"].configure(queue="single")
    rate = await timed_loop(count, lambda i: deferrer.defer_async(i=i))
    await drop_queue(app, "single")
    return rate


async def add_bulk(app: App, count: int) -> float:
    rate = await timed_batches(count, lambda indexes: defer_batch(app, "bulk", indexes))
    await drop_queue(app, "bulk")
    return rate


async def processing(app: App, count: int, concurrency: int) -> float:
    queue = f"c{concurrency}"
    await timed_batches(count, lambda indexes: defer_batch(app, queue, indexes))
    started = time.perf_counter()
    await app.run_worker_async(
        queues=[queue], concurrency=concurrency, wait=False, install_signal_handlers=False
    )
    return per_second(count, started)


async def latency(app: App, rate: int, seconds: float) -> dict[str, float]:
    deferrer = app.tasks["record"].configure(queue="latency")
    worker = asyncio.create_task(
        app.run_worker_async(queues=["latency"], concurrency=10, install_signal_handlers=False)
    )
    await asyncio.sleep(0.5)  # let the worker start and LISTEN
    total = await steady_adds(rate, seconds, lambda: deferrer.defer_async(t=time.perf_counter()))
    await wait_for_samples(SAMPLES, total)
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker
    return percentiles_ms(SAMPLES)


async def run_all(app: App, cfg: dict[str, Any]) -> dict[str, Any]:
    await app.schema_manager.apply_schema_async()
    return {
        "version": version("procrastinate"),
        "add_single": await step("add_single", add_single(app, cfg["single"])),
        "add_bulk": await step("add_bulk", add_bulk(app, cfg["jobs"])),
        "c10": await step("c10", processing(app, cfg["jobs"], 10)),
        "c100": await step("c100", processing(app, cfg["jobs"], 100)),
        "latency": await step("latency", latency(app, cfg["rate"], cfg["seconds"])),
        "notes": NOTES,
    }


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    dsn = os.environ["PSYQ_BENCH_PG_DSN"]
    async with bench_database(dsn):
        app = make_app(dsn)
        async with app.open_async():
            return await run_all(app, cfg)


if __name__ == "__main__":
    emit(asyncio.run(main(config())))
