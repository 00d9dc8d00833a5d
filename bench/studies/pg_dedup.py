"""Concurrent deduplicated add_bulk beside plain add_bulk on Postgres (issue 40).

    python -m bench.studies.pg_dedup [--url postgresql://postgres@127.0.0.1:5432/test]
                                     [--producers 3] [--batches 30] [--runs 3] [--no-worker]

Each row: `producers` tasks in one process, each adding `batches` batches of 50 jobs
(`dedup`: deduplication ids drawn from 40 and priorities 0-2, as issue 40's report;
`plain`: neither), beside one worker at concurrency 20 on the queue, in a database of
its own (bench/harness/pgdb.py). Prints jobs offered per second (50 x batches x producers over the
wall time of the adds), the calls that failed, and the deadlocks Postgres counted in the
database (pg_stat_database, read after every session ended); then the median of `runs`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from urllib.parse import urlsplit

import asyncpg

import psyq
from bench.harness.pgdb import fresh_database

SIZE, IDS = 50, 40


def batch(rng: random.Random, dedup: bool) -> list[dict[str, object]]:
    if not dedup:
        return [{"name": "plain", "data": {"n": n}} for n in range(SIZE)]
    return [
        {
            "name": "dedup",
            "data": {"n": n},
            "opts": {
                "deduplication": {"id": f"d{rng.randrange(IDS)}"},
                "priority": rng.randrange(3),
            },
        }
        for n in range(SIZE)
    ]


async def producer(queue: psyq.Queue, batches: int, seed: int, dedup: bool) -> int:
    """Adds the batches; returns the calls that failed."""
    rng, failed = random.Random(seed), 0
    for _ in range(batches):
        try:
            await queue.add_bulk(batch(rng, dedup))
        except psyq.PsyqError:
            failed += 1
    return failed


async def deadlocks(url: str) -> int:
    """Postgres's count for the database of `url`, once no session is connected to it."""
    name = urlsplit(url).path.lstrip("/")
    admin = await asyncpg.connect(url.replace(f"/{name}", "/postgres", 1))
    try:
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
        while await admin.fetchval(query, name):
            await asyncio.sleep(0.05)
        await admin.execute("SELECT pg_stat_clear_snapshot()")
        count = "SELECT deadlocks FROM pg_stat_database WHERE datname = $1"
        return int(await admin.fetchval(count, name) or 0)
    finally:
        await admin.close()


async def one_run(url: str, args: argparse.Namespace, dedup: bool) -> tuple[float, int, int]:
    """(jobs offered per second, failed calls, deadlocks counted)."""
    name = f"bench-{'dedup' if dedup else 'plain'}"
    async with psyq.Queue(name, connection=url) as queue:
        await queue.add("warm", {})  # the queue's id sequence exists before the clock runs
        worker = None
        if args.worker:
            worker = psyq.Worker(name, lambda job: None, connection=url, concurrency=20)
        started = time.perf_counter()
        failed = await asyncio.gather(
            *(producer(queue, args.batches, seed, dedup) for seed in range(args.producers))
        )
        elapsed = time.perf_counter() - started
        if worker is not None:
            await worker.close()
    offered = SIZE * args.batches * args.producers
    return offered / elapsed, sum(failed), await deadlocks(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-worker", dest="worker", action="store_false")
    args = parser.parse_args()
    print(f"{args.producers} producers x {args.batches} batches of {SIZE}, worker: {args.worker}")
    for label, dedup in (("plain add_bulk", False), ("dedup add_bulk", True)):
        rates = []
        for run in range(args.runs):
            with fresh_database(args.url, f"dedup{run}") as url:
                rate, failed, counted = asyncio.run(one_run(url, args, dedup))
            rates.append(rate)
            print(f"  {label}: {rate:8.0f} jobs/s  failed calls {failed}  deadlocks {counted}")
        print(f"{label}: median {statistics.median(rates):.0f} jobs/s of {args.runs} runs")


if __name__ == "__main__":
    main()
