"""The client's Python per add, counted (issue 24): function calls, CPU and wall per job.

    python -m bench.studies.add_costs [--mode memory|psyq|psyq-inproc|core|postgresql://...]
                                      [--adds 2000] [--bulk 20] [--grouped] [--areas]
                                      [--profile FILE] [--no-profile]

Modes: `memory` adds to memory:// in this process (the core path alone: Queue, gate, options,
codec, Job, the engine); `psyq` adds over psyq:// to a `psyq server --data memory`
started here as a child process (this process is the client alone, so its counts are the
client's; the server's CPU is read from /proc); `psyq-inproc` runs that server in this
process too (both ends' Python); `core` adds through a stub backend that answers at once,
with no event loop (the core's own work alone); a `postgresql://` URL adds to a fresh
database of that server (created and dropped here).

Per single add (after 200 warm-up adds, `--adds` of `queue.add("x", {"i": i})`) and per
job of add_bulk (`--bulk` calls of 1,000 entries built in the timed loop, as the runner
does; with `--grouped`, job i is in group `i % 10`, an integer id as bench.studies.groups
gives it: `group={"id": i % 10}` as a keyword on a single add, `"opts": {"group": ...}` in a
bulk entry): cProfile's function calls (all of them, `pstats.total_calls`; they do not move with
the machine's load; with `--areas`, split by where they run, a C call counted in its
caller's area), then a second pass without the profiler for the process's CPU (user +
system) and wall. Instruction counts: run twice under `valgrind --tool=callgrind` (or
`perf stat -e instructions:u`) with different `--adds` and `--no-profile`, and divide the
difference by the difference in adds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import psyq
from bench.harness.pgdb import fresh_database
from bench.harness.processes import cpu_seconds, psyq_server
from psyq.backends.base import JobRecord, NewJob

WARM_UP = 200
BULK_SIZE = 1000


@contextlib.asynccontextmanager
async def connection(mode: str) -> AsyncIterator[str]:
    """The URL of a store of `mode` for the run (a server started for it, in mode psyq)."""
    if mode == "memory":
        yield "memory://"
    elif mode == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/jobs.db"
    elif mode == "psyq":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the same psyq
        with psyq_server(env=env, cwd=tempfile.gettempdir()) as (url, pid):
            SERVER["pid"] = pid
            yield url
    elif mode == "psyq-inproc":
        from psyq.backends import open_backend, release_backend
        from psyq.backends.server.server import serve

        backend = await open_backend("memory://")
        server, (host, port) = await serve(backend, "127.0.0.1", 0)
        try:
            yield f"psyq://{host}:{port}"
        finally:
            await server.close()
            await release_backend(backend)
    elif mode.startswith(("postgres://", "postgresql://")):
        database = fresh_database(mode, "costs")  # its own database, as the runner gives
        url = await asyncio.to_thread(database.__enter__)
        try:
            yield url
        finally:
            await asyncio.to_thread(database.__exit__, None, None, None)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


GROUPS = 10  # the groups of --grouped (job i in group i % GROUPS)


def entries(first: int, count: int, grouped: bool) -> list[dict[str, Any]]:
    """add_bulk entries of jobs first.. first + count - 1 (in their groups if `grouped`)."""
    if not grouped:
        return [{"name": "x", "data": {"i": i}} for i in range(first, first + count)]
    return [
        {"name": "x", "data": {"i": i}, "opts": {"group": {"id": i % GROUPS}}}
        for i in range(first, first + count)
    ]


async def singles(queue: psyq.Queue, count: int) -> None:
    for i in range(count):
        await queue.add("x", {"i": i})


async def grouped_singles(queue: psyq.Queue, count: int) -> None:
    for i in range(count):
        await queue.add("x", {"i": i}, group={"id": i % GROUPS})


async def bulks(queue: psyq.Queue, calls: int) -> None:
    for c in range(calls):
        await queue.add_bulk(entries(c * BULK_SIZE, BULK_SIZE, False))


async def grouped_bulks(queue: psyq.Queue, calls: int) -> None:
    for c in range(calls):
        await queue.add_bulk(entries(c * BULK_SIZE, BULK_SIZE, True))


SERVER: dict[str, int] = {}  # the pid of the server process, in mode psyq


def cpu() -> float:
    return time.process_time()


def server_cpu() -> float:
    """The server process's user + system CPU seconds (/proc), or 0 without one."""
    return cpu_seconds(SERVER["pid"]) if "pid" in SERVER else 0.0


AREAS = (  # (a part of a module's path, the area it is counted in), first match
    ("psyq/core/", "core"),
    ("psyq/backends/engine/", "engine"),
    ("psyq/backends/server/", "wire"),
    ("asyncio", "asyncio"),
    ("bench/", "bench"),
)


def _area(function: tuple[str, int, str]) -> str | None:
    path = function[0].replace(os.sep, "/")
    return next((area for part, area in AREAS if part in path), None)


def areas(stats: pstats.Stats, jobs: int) -> dict[str, float]:
    """Calls per job by area: a function of psyq's in its module's, any other (a C call, a
    library's) in its callers' (cProfile's callers table)."""
    found: dict[str, float] = {}
    for function, (_, calls, _, _, callers) in stats.stats.items():  # type: ignore[attr-defined]
        area = _area(function)
        if area is not None:
            found[area] = found.get(area, 0) + calls
            continue
        for caller, counts in callers.items():
            where = _area(caller) or "other"
            found[where] = found.get(where, 0) + (counts[1] if type(counts) is tuple else counts)
    return {area: round(calls / jobs, 1) for area, calls in sorted(found.items())}


async def measure(
    queue: psyq.Queue, run: Any, n: int, jobs: int, profile: bool, by_area: bool = False
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await run(queue, n)
        profiler.disable()
        stats = pstats.Stats(profiler)
        result["calls"] = round(stats.total_calls / jobs, 1)  # type: ignore[attr-defined]
        if by_area:
            result["areas"] = areas(stats, jobs)
        result["_stats"] = stats
    wall, used, served = time.perf_counter(), cpu(), server_cpu()
    await run(queue, n)
    result["cpu_us"] = round((cpu() - used) / jobs * 1e6, 2)
    if SERVER:
        result["server_cpu_us"] = round((server_cpu() - served) / jobs * 1e6, 2)
    result["wall_us"] = round((time.perf_counter() - wall) / jobs * 1e6, 2)
    return result


class _Answering:
    """Mode core: a backend that answers an add at once, so only the core's work is counted
    (Queue, the gate, options, codec, Job), driven without an event loop."""

    async def add_jobs(self, queue: str, jobs: list[NewJob]) -> list[JobRecord]:
        return [JobRecord(str(i), queue, j.name, j.data, j.opts, 1) for i, j in enumerate(jobs)]


def _drive(coro: Any) -> Any:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the stub backend suspended")


def core_only(args: argparse.Namespace) -> dict[str, Any]:
    queue = psyq.Queue("costs", connection="memory://")
    queue._backend = _Answering()  # type: ignore[assignment]  # never opened, nothing to close

    grouped = args.grouped

    def singles_now(n: int) -> None:
        if grouped:
            for i in range(n):
                _drive(queue.add("x", {"i": i}, group={"id": i % GROUPS}))
        else:
            for i in range(n):
                _drive(queue.add("x", {"i": i}))

    def bulks_now(calls: int) -> None:
        for c in range(calls):
            _drive(queue.add_bulk(entries(c * BULK_SIZE, BULK_SIZE, grouped)))

    out: dict[str, Any] = {"mode": "core", "adds": args.adds, "bulk_jobs": args.bulk * 1000}
    out["grouped"] = grouped
    singles_now(WARM_UP)
    for row, run, n, jobs in (
        ("single", singles_now, args.adds, args.adds),
        ("bulk", bulks_now, args.bulk, args.bulk * BULK_SIZE),
    ):
        if not jobs:
            continue
        out[row] = result = {}
        if not args.no_profile:
            profiler = cProfile.Profile()
            profiler.runcall(run, n)
            result["calls"] = round(pstats.Stats(profiler).total_calls / jobs, 1)  # type: ignore[attr-defined]
        used = cpu()
        run(n)
        result["cpu_us"] = round((cpu() - used) / jobs * 1e6, 2)
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": args.mode, "adds": args.adds, "bulk_jobs": args.bulk * 1000}
    out["grouped"] = args.grouped
    one, many = (grouped_singles, grouped_bulks) if args.grouped else (singles, bulks)
    async with connection(args.mode) as url, psyq.Queue("costs", connection=url) as queue:
        await one(queue, WARM_UP)
        profile = not args.no_profile
        out["single"] = await measure(queue, one, args.adds, args.adds, profile, args.areas)
        if args.bulk:
            jobs = args.bulk * BULK_SIZE
            out["bulk"] = await measure(queue, many, args.bulk, jobs, profile, args.areas)
        await queue.obliterate(force=True)
    if args.profile and profile:
        out["single"]["_stats"].dump_stats(args.profile)
    for row in ("single", "bulk"):
        if row in out:
            out[row].pop("_stats", None)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="memory")
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--bulk", type=int, default=20, help="add_bulk calls of 1,000 jobs")
    parser.add_argument(
        "--grouped", action="store_true", help=f"each job in one of {GROUPS} groups"
    )
    parser.add_argument("--areas", action="store_true", help="calls per job by where they run")
    parser.add_argument("--profile", help="write the single adds' cProfile stats here")
    parser.add_argument("--no-profile", action="store_true", help="time only (for callgrind)")
    arguments = parser.parse_args()
    core = arguments.mode == "core"
    print(json.dumps(core_only(arguments) if core else asyncio.run(main(arguments))))
