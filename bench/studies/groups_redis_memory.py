"""Redis memory per waiting job, plain and grouped, and what an emptied group leaves.

    python -m bench.studies.groups_redis_memory [--url redis://127.0.0.1:6379/0]
                                                [--jobs 100000] [--rounds 3]

Each round adds `--jobs` waiting jobs (60-byte data) to a fresh queue, plain, then in 10
groups, then in 10,000 groups, reading Redis' `used_memory` before and after each (the
server should be otherwise idle: another client's keys count too); then a worker runs a
grouped queue empty and the queue's group keys left are counted (0 expected). Prints one
JSON line per round, then the medians with the grouped/plain ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import uuid
from typing import Any

from redis.asyncio import Redis

import psyq
from bench.studies.groups import DATA, entries


async def bytes_per_job(url: str, raw: Any, count: int, groups: int) -> float:
    async with psyq.Queue(f"gm-{uuid.uuid4().hex[:8]}", connection=url) as queue:
        await queue.add("warm", DATA)  # the queue's own keys (meta, events) before the count
        before = int((await raw.info("memory"))["used_memory"])
        for start in range(0, count, 1000):
            await queue.add_bulk(entries(min(1000, count - start), groups, start))
        after = int((await raw.info("memory"))["used_memory"])
        await queue.obliterate(force=True)
    return (after - before) / count


async def keys_left(url: str, raw: Any) -> int:
    """A grouped queue run empty: its group keys left."""
    name = f"gm-{uuid.uuid4().hex[:8]}"
    async with psyq.Queue(name, connection=url) as queue:
        await queue.add_bulk(entries(1000, 100))
        done = asyncio.Event()

        def work(job: psyq.Job) -> None:
            if len(seen) == 999:
                done.set()
            seen.append(job.id)

        seen: list[str] = []
        async with psyq.Worker(name, work, connection=url, concurrency=10):
            await done.wait()  # closing the worker settles the jobs it holds
        left = len(await raw.keys(f"bull:{name}:group*"))
        await queue.obliterate(force=True)
    return left


async def one_round(url: str, count: int) -> dict[str, float]:
    raw = Redis.from_url(url, decode_responses=True)
    try:
        row = {"plain": await bytes_per_job(url, raw, count, 0)}
        for groups in (10, 10_000):
            row[f"{groups} groups"] = await bytes_per_job(url, raw, count, groups)
        row["group keys left"] = await keys_left(url, raw)
    finally:
        await raw.aclose()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for _ in range(args.rounds):
        rows.append(asyncio.run(one_round(args.url, args.jobs)))
        print(json.dumps(rows[-1]), flush=True)
    medians = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    ratios = {f"{k} / plain": medians[k] / medians["plain"] for k in ("10 groups", "10000 groups")}
    print(json.dumps({"median": medians, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
