"""A long run on Postgres under an event policy: jobs through one c50 Worker, autovacuum as
the server has it, retention on (issue 52, item 4).

    python -m bench.studies.pg_long_run [--url postgresql://postgres@127.0.0.1:5432/postgres]
                                        [--jobs 1000000] [--events when-read] [--slice 100000]

A fresh database (bench/harness/pgdb.py). A producer keeps between 10,000 and 20,000 jobs
waiting (add_bulk of 1,000, each job `removeOnComplete: 1000`); one Worker with
concurrency 50 runs no-op jobs until `--jobs` completed. Printed: jobs/s of each slice of
`--slice` completions, the last slice's against the first (goal >= 0.9x), and the sizes of
the layout's `job` and `event` tables and of their indexes at the end, with their dead rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import asyncpg

import psyq
from bench.harness.pgdb import fresh_database
from psyq.backends.postgres import parse_postgres_url

BULK = 1000
LOW, HIGH = 10_000, 20_000  # jobs waiting the producer keeps between


async def produce(queue: psyq.Queue, total: int, done: list[int]) -> None:
    """Add `total` jobs, keeping the backlog between LOW and HIGH."""
    added = 0
    opts = {"removeOnComplete": 1000}
    while added < total:
        if added - done[0] >= HIGH:
            await asyncio.sleep(0.05)  # sleep: the backlog is full; the worker drains it
            continue
        while added < total and added - done[0] < HIGH:
            size = min(BULK, total - added)
            await queue.add_bulk([{"name": "x", "data": {}, "opts": opts}] * size)
            added += size
        if added - done[0] < LOW:
            print(json.dumps({"note": "backlog below LOW", "added": added, "done": done[0]}))


async def sizes(url: str) -> dict[str, Any]:
    settings = parse_postgres_url(url)
    conn = await asyncpg.connect(settings.dsn, server_settings={"search_path": settings.schema})
    try:
        rows = await conn.fetch(
            "SELECT relname, pg_relation_size(relid) AS heap, pg_indexes_size(relid) AS idx,"
            " n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables"
            " WHERE relname IN ('job', 'event', 'psyq_finished')"
        )
    finally:
        await conn.close()
    mib = 1024 * 1024
    return {
        r["relname"]: {
            "heap_mib": round(r["heap"] / mib, 1),
            "indexes_mib": round(r["idx"] / mib, 1),
            "live": r["n_live_tup"],
            "dead": r["n_dead_tup"],
            "autovacuums": r["autovacuum_count"],
        }
        for r in rows
    }


async def run(url: str, total: int, piece: int) -> dict[str, Any]:
    done = [0]

    async def work(job: psyq.Job) -> None:
        done[0] += 1

    marks: list[float] = []
    async with psyq.Queue("long", connection=url) as queue:
        await queue.add("x", {})  # the layout's first add creates the queue's sequence
        producer = asyncio.ensure_future(produce(queue, total - 1, done))
        worker = psyq.Worker("long", work, connection=url, concurrency=50)
        start = time.perf_counter()
        try:
            while done[0] < total:
                if done[0] >= piece * (len(marks) + 1):
                    marks.append(time.perf_counter() - start)
                await asyncio.sleep(0.05)  # sleep: the pace at which slices are timed
            marks += [time.perf_counter() - start] * (total // piece - len(marks))
        finally:
            await worker.close()
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
    rates = [piece / (b - a) for a, b in zip([0.0, *marks], marks, strict=False)]
    return {
        "slices_jobs_per_s": [round(r) for r in rates],
        "last_vs_first": round(rates[-1] / rates[0], 2) if rates else None,
        "seconds": round(time.perf_counter() - start, 1),
        "tables": await sizes(url),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--slice", type=int, default=100_000)
    parser.add_argument("--events", default="when-read")
    args = parser.parse_args()
    base = args.url + ("&" if "?" in args.url else "?") + f"events={args.events}"
    with fresh_database(base, "long_run") as url:
        print(json.dumps(asyncio.run(run(url, args.jobs, args.slice))))


if __name__ == "__main__":
    main()
