"""The Worker's Python per processed job, counted (issue 35, item 2): function calls, CPU and
wall per job of the hot side (take -> run -> settle), with a no-op async processor.

    python -m bench.studies.worker_costs [--mode memory|psyq|psyq-inproc|sqlite|postgresql://...]
                                         [--jobs 5000] [--concurrency 1,10] [--profile FILE]
                                         [--no-profile]

Modes: `memory` processes from memory:// in this process (the core's worker path and the
engine); `psyq` over psyq:// from a `psyq server --data memory` started here as a
child process (this process is the worker alone, so its counts are the client's; the
server's CPU is read from /proc); `psyq-inproc` runs that server in this process too (both
ends' Python); `sqlite` from a sqlite:/// file in a temporary folder; a `postgresql://`
URL from a fresh database of that server (its CPU is not counted: see bench/studies/pg_floor.py).

Per concurrency: `--jobs` jobs are added in bulk first (not counted), then a Worker with
that concurrency processes them all; cProfile's function calls per job (all of them,
`pstats.total_calls`; they do not move with the machine's load) in one pass, then a second
pass without the profiler for the process's CPU (user + system) and wall per job. Both
passes start the Worker after the fill, so its start-up is counted (a few hundred calls,
nothing per job). Instruction counts: run under `valgrind --tool=callgrind` with two
`--jobs` and `--no-profile`, and divide the difference by the difference in jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import time
from typing import Any

import psyq
from bench.harness.workloads import fill, noop
from bench.peers.peerlib import Countdown
from bench.studies.add_costs import SERVER, connection, server_cpu  # one way to start a store


async def process(url: str, queue: psyq.Queue, jobs: int, concurrency: int) -> None:
    """Start a Worker and return once it has completed `jobs` jobs (then close it)."""
    completions = Countdown(jobs)
    worker = psyq.Worker(queue.name, noop, connection=url, concurrency=concurrency)
    worker.on("completed", completions.hit)
    await completions.done.wait()
    await worker.close()


async def measure(
    url: str, queue: psyq.Queue, jobs: int, concurrency: int, profile: bool
) -> tuple[dict[str, Any], pstats.Stats | None]:
    result: dict[str, Any] = {}
    stats = None
    if profile:
        await fill(queue, jobs)
        profiler = cProfile.Profile()
        profiler.enable()
        await process(url, queue, jobs, concurrency)
        profiler.disable()
        stats = pstats.Stats(profiler)
        result["calls"] = round(stats.total_calls / jobs, 1)  # type: ignore[attr-defined]
    await fill(queue, jobs)
    wall, used, served = time.perf_counter(), time.process_time(), server_cpu()
    await process(url, queue, jobs, concurrency)
    result["cpu_us"] = round((time.process_time() - used) / jobs * 1e6, 2)
    if SERVER:
        result["server_cpu_us"] = round((server_cpu() - served) / jobs * 1e6, 2)
    result["wall_us"] = round((time.perf_counter() - wall) / jobs * 1e6, 2)
    return result, stats


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": args.mode, "jobs": args.jobs}
    levels = [int(c) for c in args.concurrency.split(",")]
    async with connection(args.mode) as url, psyq.Queue("wcosts", connection=url) as queue:
        await fill(queue, 200)  # warm-up: imports, the first connection, the first fetch
        await process(url, queue, 200, 1)
        for concurrency in levels:
            result, stats = await measure(url, queue, args.jobs, concurrency, not args.no_profile)
            out[f"c{concurrency}"] = result
            if args.profile and stats is not None:
                stats.dump_stats(f"{args.profile}.c{concurrency}")
        await queue.obliterate(force=True)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="memory")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--concurrency", default="1,10")
    parser.add_argument("--profile", help="write each row's cProfile stats to FILE.c<N>")
    parser.add_argument("--no-profile", action="store_true", help="time only (for callgrind)")
    arguments = parser.parse_args()
    print(json.dumps(asyncio.run(main(arguments))))
