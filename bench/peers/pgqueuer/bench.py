"""pgqueuer side of bench/run.py: the same workloads on the same Postgres server.

Run by bench/run.py in its own virtualenv (bench/peers/pgqueuer/.venv, made on first use
from requirements.txt):  python bench.py '<config JSON>'  with PSYQ_BENCH_PG_DSN set.
pgqueuer's tables go to a fresh schema (PGQUEUER_SCHEMA), dropped at the end. Prints one
JSON line. Mapping of the rows: add one by one = `enqueue` per job; add_bulk = `enqueue`
of lists of 1,000; processing cN = a QueueManager with a no-op entrypoint, batch_size N/2
and max_concurrent_tasks N, in drain mode; add-to-start = enqueue at a steady rate while a
QueueManager runs, latency from enqueue to handler start. Flows have no pgqueuer
counterpart.

Two setups, each row measured in both and the better one reported (`setup` names which):
"connection", what pgqueuer's documentation shows (`AsyncpgDriver` on a connection of its
own for the producer and one for each QueueManager), and "pool" (`AsyncpgPoolDriver` on an
asyncpg pool, whose release runs asyncpg's reset query: one more round trip per call).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

SCHEMA = f"pgqueuer_bench_{uuid.uuid4().hex[:8]}"
os.environ["PGQUEUER_SCHEMA"] = SCHEMA

import asyncpg  # noqa: E402
import pgqueuer  # noqa: E402
from pgqueuer import AsyncpgDriver, AsyncpgPoolDriver, Queries, QueueManager  # noqa: E402
from pgqueuer.types import QueueExecutionMode  # noqa: E402

BATCH = 1000


async def add_single(queries: Queries, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        await queries.enqueue("single", json.dumps({"i": i}).encode())
    return count / (time.perf_counter() - started)


async def fill(queries: Queries, entrypoint: str, count: int) -> float:
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        payloads = [json.dumps({"i": start + i}).encode() for i in range(size)]
        await queries.enqueue([entrypoint] * size, payloads, [0] * size)
    return count / (time.perf_counter() - started)


async def processing(producer: Any, consumer: Any, count: int, concurrency: int) -> float:
    name = f"c{concurrency}"
    await fill(Queries(producer), name, count)
    return count / await drain(consumer, name, concurrency)


async def drain(consumer: Any, entrypoint: str, concurrency: int) -> float:
    """Seconds a QueueManager set up for concurrency N takes to run every job queued for
    `entrypoint`."""
    qm = QueueManager(Queries(consumer))

    @qm.entrypoint(entrypoint)
    async def noop(job: Any) -> None:
        return None

    started = time.perf_counter()
    await qm.run(
        batch_size=max(1, concurrency // 2),
        max_concurrent_tasks=max(concurrency, 2),
        mode=QueueExecutionMode.drain,
    )
    return time.perf_counter() - started


async def latency(producer: Any, consumer: Any, rate: int, seconds: float) -> dict[str, float]:
    queries = Queries(producer)
    qm = QueueManager(Queries(consumer))
    seen: list[float] = []

    @qm.entrypoint("latency")
    async def record(job: Any) -> None:
        seen.append(time.perf_counter() - json.loads(job.payload)["t"])

    runner = asyncio.create_task(qm.run(batch_size=5, max_concurrent_tasks=10))
    # one job through first, as on every side: the row measures a running consumer
    await queries.enqueue("latency", json.dumps({"t": time.perf_counter()}).encode())
    while not seen:
        await asyncio.sleep(0.001)
    seen.clear()
    total = int(rate * seconds)
    started = time.perf_counter()
    for i in range(total):
        await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
        await queries.enqueue("latency", json.dumps({"t": time.perf_counter()}).encode())
    deadline = time.perf_counter() + 30
    while len(seen) < total and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    qm.shutdown.set()
    await runner
    ordered = sorted(seen)
    return {
        "p50": ordered[len(ordered) // 2] * 1000,
        "p99": ordered[int(len(ordered) * 0.99)] * 1000,
    }


class Setup:
    """The drivers of one setup: the producer's and a fresh one per QueueManager."""

    def __init__(self, name: str, dsn: str) -> None:
        self.name, self.dsn = name, dsn
        self._closers: list[Any] = []

    async def driver(self) -> Any:
        if self.name == "pool":
            if not self._closers:
                self._closers.append(await asyncpg.create_pool(self.dsn, min_size=2, max_size=10))
            return AsyncpgPoolDriver(self._closers[0])
        connection = await asyncpg.connect(self.dsn)
        self._closers.append(connection)
        return AsyncpgDriver(connection)

    async def close(self) -> None:
        for closer in self._closers:
            await closer.close()


async def rows(setup: Setup, cfg: dict[str, Any]) -> dict[str, Any]:
    producer = await setup.driver()
    queries = Queries(producer)
    return {
        "add_single": await add_single(queries, cfg["single"]),
        "add_bulk": await fill(queries, "bulk", cfg["jobs"]),
        "c10": await processing(producer, await setup.driver(), cfg["jobs"], 10),
        "c100": await processing(producer, await setup.driver(), cfg["jobs"], 100),
        "latency": await latency(producer, await setup.driver(), cfg["rate"], cfg["seconds"]),
    }


def better(by_setup: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each row from the setup that did it better (faster; for latency the lower p99)."""
    best: dict[str, Any] = {}
    chosen: list[str] = []
    for row in next(iter(by_setup.values())):
        if row == "latency":
            name = min(by_setup, key=lambda setup: by_setup[setup][row]["p99"])
        else:
            name = max(by_setup, key=lambda setup: by_setup[setup][row])
        best[row] = by_setup[name][row]
        chosen.append(f"{row} {name}")
    figures = "; ".join(
        f"{setup}: "
        + ", ".join(f"{row} {value:,.0f}/s" for row, value in result.items() if row != "latency")
        for setup, result in by_setup.items()
    )
    best["notes"] = [f"pgqueuer setups, the better kept per row ({', '.join(chosen)}): {figures}"]
    return best


async def main(cfg: dict[str, Any]) -> dict[str, Any]:
    dsn = os.environ["PSYQ_BENCH_PG_DSN"]
    connection = await asyncpg.connect(dsn)
    await Queries(AsyncpgDriver(connection)).install()
    by_setup: dict[str, dict[str, Any]] = {}
    try:
        for name in ("connection", "pool"):
            setup = Setup(name, dsn)
            try:
                by_setup[name] = await rows(setup, cfg)
            finally:
                await setup.close()
            await Queries(AsyncpgDriver(connection)).clear_queue()  # each setup starts empty
        return {"version": pgqueuer.__version__, **better(by_setup)}
    finally:
        drop = "SELECT format('DROP SCHEMA IF EXISTS %I CASCADE', $1::text)"
        await connection.execute(await connection.fetchval(drop, SCHEMA))
        await connection.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
