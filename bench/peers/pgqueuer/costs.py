"""pgqueuer's processing rows with the server's counters around them (bench/studies/pg_costs.py
runs this in pgqueuer's virtualenv, with PSYQ_BENCH_PG_DSN set): per setup of bench.py and
per concurrency, `jobs` jobs added first, then drained by a QueueManager as bench.py's cN
rows do, with bench/peers/pg_counters.py's snapshots around the drain. Prints one JSON
line."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import bench  # first: it names pgqueuer's schema before pgqueuer is imported

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/peers: pg_counters
import asyncpg
from pg_counters import per_job, snapshot
from pgqueuer import AsyncpgDriver, Queries


async def setup_rows(setup: bench.Setup, admin: Any, jobs: int, levels: list[int]) -> Any:
    rows: dict[str, dict[str, float]] = {}
    producer = Queries(await setup.driver())
    for concurrency in levels:
        name = f"c{concurrency}"
        await bench.fill(producer, name, jobs)
        consumer = await setup.driver()
        before = await snapshot(admin)
        await bench.drain(consumer, name, concurrency)
        rows[f"pgqueuer {setup.name} c{concurrency}"] = per_job(before, await snapshot(admin), jobs)
    return rows


async def main(cfg: dict[str, Any]) -> dict[str, dict[str, float]]:
    dsn = os.environ["PSYQ_BENCH_PG_DSN"]
    admin = await asyncpg.connect(dsn)
    await Queries(AsyncpgDriver(admin)).install()
    rows: dict[str, dict[str, float]] = {}
    try:
        for name in ("connection", "pool"):
            setup = bench.Setup(name, dsn)
            try:
                rows.update(await setup_rows(setup, admin, cfg["jobs"], cfg["levels"]))
            finally:
                await setup.close()
        return rows
    finally:
        drop = "SELECT format('DROP SCHEMA IF EXISTS %I CASCADE', $1::text)"
        await admin.execute(await admin.fetchval(drop, bench.SCHEMA))
        await admin.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
