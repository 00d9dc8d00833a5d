"""The live move's throughput: jobs moved per second from A to B while both sides run.

    python -m bench.studies.live_move [--jobs 20000] [--from redis|postgres|psyq] [--to ...]
                                      [--redis URL] [--postgres URL] [--concurrency 8]

A holds --jobs waiting jobs (a fresh Redis prefix, Postgres schema, or a `psyq server` over
memory started for the run; dropped at the end). Workers run on A (two, each --concurrency)
and on B (one) the whole time, and a producer adds to A, then switches to B two seconds
after the mover's first progress line, for two seconds more. The mover is
`psyq.migrate_live` in this process (quiet_for 2 s). Prints one JSON line: the jobs moved,
the moved/s from the first move to the last (`rate`, the mover's own figure), the runs on
each side, and checks every added job ran exactly once and is on B.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psyq
from bench.harness.processes import psyq_server
from bench.harness.stores import drop_endpoint, fresh_endpoint
from psyq_migrate.live import LiveProgress


async def scenario(source: str, destination: str, jobs: int, concurrency: int) -> dict[str, Any]:
    ran: Counter[str] = Counter()
    sides: Counter[str] = Counter()
    added: dict[str, str] = {}
    first_line = asyncio.Event()
    lines: list[LiveProgress] = []

    def processor(side: str) -> Any:
        async def process(job: psyq.Job) -> Any:
            ran[job.data["k"]] += 1
            sides[side] += 1
            await asyncio.sleep(0.0005)
            return job.data["k"]

        return process

    async with psyq.Queue("live", connection=source) as on_a:
        for start in range(0, jobs, 1000):
            batch = [{"name": "w", "data": {"k": f"f{i}"}} for i in range(start, start + 1000)]
            for job in await on_a.add_bulk(batch[: jobs - start]):
                added[job.data["k"]] = job.id
    workers = [
        psyq.Worker("live", processor(side), connection=url, concurrency=concurrency)
        for side, url in (("A", source), ("A", source), ("B", destination))
    ]

    async def produce() -> None:
        async with (
            psyq.Queue("live", connection=source) as a,
            psyq.Queue("live", connection=destination) as b,
        ):
            n, queue, switch_at, end_at = 0, a, None, None
            while end_at is None or time.monotonic() < end_at:
                if switch_at is None and first_line.is_set():
                    switch_at = time.monotonic() + 2
                if switch_at is not None and queue is a and time.monotonic() >= switch_at:
                    queue, end_at = b, time.monotonic() + 2
                job = await queue.add("p", {"k": f"p{n}"})
                added[f"p{n}"] = job.id
                n += 1
                await asyncio.sleep(0.002)

    def seen(step: LiveProgress) -> None:
        lines.append(step)
        first_line.set()

    with tempfile.TemporaryDirectory() as folder:
        producing = asyncio.ensure_future(produce())
        started = time.perf_counter()
        result = await psyq.migrate_live(
            source, destination, ["live"], 2.0, f"{folder}/journal", seen
        )
        seconds = time.perf_counter() - started
        await producing
    async with psyq.Queue("live", connection=destination) as on_b:
        deadline = time.monotonic() + 120
        while set(ran) != set(added) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for worker in workers:
            await worker.close()
        missing = [k for k, job_id in added.items() if await on_b.get_job(job_id) is None]
    twice = sum(1 for runs in ran.values() if runs > 1)
    assert not twice and not missing and set(ran) == set(added), (twice, missing[:5])
    return {
        "prefilled": jobs,
        "added": len(added),
        "moved": result.moved,
        "moved_per_s": round(result.rate),
        "mover_s": round(seconds, 2),
        "ran_on_a": sides["A"],
        "ran_on_b": sides["B"],
        "ran_twice": twice,
        "not_on_b": len(missing),
        "progress_lines": len(lines),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--from", dest="source", default="redis")
    parser.add_argument("--to", dest="destination", default="postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    sides = {"a": args.source, "b": args.destination}
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as folder:
        # psyq: one `psyq server` over memory, started for the run, holds both psyq sides
        served = stack.enter_context(psyq_server())[0] if "psyq" in sides.values() else ""
        urls = {
            role: served
            if kind == "psyq"
            else fresh_endpoint(kind, f"benchlive{role}", args.redis, args.postgres, Path(folder))
            for role, kind in sides.items()
        }
        try:
            figures = asyncio.run(scenario(urls["a"], urls["b"], args.jobs, args.concurrency))
        finally:
            for url in urls.values():
                asyncio.run(drop_endpoint(url))
    figures.update(
        {"from": args.source, "to": args.destination, "python": platform.python_version()}
    )
    figures["load_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
