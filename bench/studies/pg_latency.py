"""The runner's add-to-start latency row on Postgres, alone (issue 19).

    python -m bench.studies.pg_latency row   --url postgresql://postgres@127.0.0.1:5432/postgres
    python -m bench.studies.pg_latency start --url postgresql://postgres@127.0.0.1:5432/postgres

`row`: the runner's `latency()` (bench/harness/workloads.py: 500 adds/s for 3 s into a c10
Worker, or `--concurrency N`, started with the first add) in a fresh database: p50, p99,
and commits per job (the database's xact_commit, adds included). `start`: a fresh Queue,
then a Worker started with the first add (as the row does), 100 adds at 500/s: ms from the
Worker's creation to its first job running, and the mean latency of the first 50 jobs (the
row's p99 is its ~15th worst sample, and a worker's start delays the first ones). One JSON
line per round; run the trees to compare in alternating rounds (PYTHONPATH=<other tree>),
and give the load average with them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid

import asyncpg

import psyq
from bench.harness.pgdb import fresh_database
from bench.harness.workloads import latency
from bench.peers.peerlib import steady_adds


async def commits(url: str) -> int:
    conn = await asyncpg.connect(url.split("?")[0])
    try:
        query = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        return int(await conn.fetchval(query))
    finally:
        await conn.close()


async def row(url: str, concurrency: int) -> dict[str, float]:
    before = await commits(url)
    figures = await latency(url, 500, 3, concurrency)
    await asyncio.sleep(0.6)  # the server's statistics are flushed every 500 ms
    return {**figures, "commits_per_job": (await commits(url) - before) / 1500}


async def start(url: str) -> dict[str, float]:
    seen: list[tuple[float, float]] = []

    async def record(job: psyq.Job) -> None:
        seen.append((job.data["t"], time.perf_counter()))

    async with psyq.Queue("start" + uuid.uuid4().hex[:8], connection=url) as queue:
        created = time.perf_counter()
        worker = psyq.Worker(queue.name, record, connection=url, concurrency=10)
        total = await steady_adds(500, 0.2, lambda: queue.add("x", {"t": time.perf_counter()}))
        while len(seen) < total:
            await asyncio.sleep(0.005)
        await worker.close()
        await queue.obliterate()
    seen.sort()
    first = [(ran - added) * 1000 for added, ran in seen[:50]]
    return {"first_job_ms": (seen[0][1] - created) * 1000, "first_50_mean_ms": sum(first) / 50}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("row", "start"))
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=10, help="the row's worker (row)")
    args = parser.parse_args()
    for _ in range(args.rounds):
        with fresh_database(args.url, "latency") as url:
            work = row(url, args.concurrency) if args.mode == "row" else start(url)
            figures = asyncio.run(work)
        rounded = {key: round(value, 2) for key, value in figures.items()}
        print(json.dumps({**rounded, "psyq": psyq.__file__, "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
