"""CPU per job of two psyq checkouts side by side: this one and `--base` (another checkout,
e.g. `git worktree add --detach ../base <commit>`), alternating, one fresh process per run.

    python -m bench.studies.cpu_pairs --base ../base [--url sqlite|sqlite-durable|memory|URL]
                                      [--rows c10,c100,add,add_bulk] [--jobs 20000] [--rounds 5]

The figure is the CPU time of the event loop's thread per job (`time.thread_time`), which
machine load moves far less than jobs/s: other processes take wall time from a run, not
the instructions it executes. Rows: c10/c100 process `--jobs` no-op jobs at that
concurrency (the fill is not counted), add adds `--jobs` one by one, add_bulk in batches of
1,000. Prints the median of `--rounds` runs per checkout and their ratio (this / base),
with the wall rates beside them (those do move with load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench.harness.processes import ROOT

# One run, in a fresh process whose `psyq` is the checkout on PYTHONPATH: prints
# {"cpu_us": loop-thread CPU per job, "rate": jobs/s}.
RUN = r"""
import asyncio, json, sys, tempfile, time
import psyq

ROW, JOBS, URL = sys.argv[1], int(sys.argv[2]), sys.argv[3]
URL = URL.replace("{dir}", tempfile.mkdtemp())


async def noop(job):
    return None


async def processing(queue, concurrency):
    await queue.add_bulk([{"name": "j", "data": {"i": i}} for i in range(JOBS)])
    done, seen = asyncio.Event(), 0

    def completed(job, result):
        nonlocal seen
        seen += 1
        if seen == JOBS:
            done.set()

    cpu, wall = time.thread_time(), time.perf_counter()
    worker = psyq.Worker(queue.name, noop, connection=URL, concurrency=concurrency)
    worker.on("completed", completed)
    await done.wait()
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    await worker.close()
    return cpu, wall


async def adding(queue, bulk):
    cpu, wall = time.thread_time(), time.perf_counter()
    if bulk:
        for start in range(0, JOBS, 1000):
            batch = range(start, start + 1000)
            await queue.add_bulk([{"name": "j", "data": {"i": i}} for i in batch])
    else:
        for i in range(JOBS):
            await queue.add("j", {"i": i})
    return time.thread_time() - cpu, time.perf_counter() - wall


async def main():
    async with psyq.Queue("cpu", connection=URL) as queue:
        if ROW in ("c10", "c100"):
            cpu, wall = await processing(queue, int(ROW[1:]))
        else:
            cpu, wall = await adding(queue, ROW == "add_bulk")
        await queue.obliterate()
    print(json.dumps({"cpu_us": cpu / JOBS * 1e6, "rate": JOBS / wall}))


asyncio.run(main())
"""

URLS = {
    "sqlite": "sqlite:///{dir}/jobs.db",
    "sqlite-durable": "sqlite:///{dir}/jobs.db?durability=durable",
    "memory": "memory://",
}


def run(checkout: Path, row: str, jobs: int, url: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", RUN, row, str(jobs), url],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {row} failed:\n{done.stderr}")
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the other checkout")
    parser.add_argument("--url", default="sqlite", help="sqlite, sqlite-durable, memory or a URL")
    parser.add_argument("--rows", default="c10,c100,add,add_bulk")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    url = URLS.get(args.url, args.url)
    checkouts = {"base": args.base.resolve(), "this": ROOT}
    print(f"url {url}; base {checkouts['base']}; this {ROOT}; {args.rounds} rounds")
    for row in args.rows.split(","):
        figures: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
        for _ in range(args.rounds):
            for name, checkout in checkouts.items():  # alternate: drift hits both alike
                figures[name].append(run(checkout, row, args.jobs, url))
        cpu = {name: statistics.median(f["cpu_us"] for f in runs) for name, runs in figures.items()}
        rate = {name: statistics.median(f["rate"] for f in runs) for name, runs in figures.items()}
        print(
            f"{row:9s} cpu/job base {cpu['base']:6.1f} us  this {cpu['this']:6.1f} us  "
            f"ratio {cpu['this'] / cpu['base']:.3f}   jobs/s base {rate['base']:8.0f}  "
            f"this {rate['this']:8.0f}  ratio {rate['this'] / rate['base']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
