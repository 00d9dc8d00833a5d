"""psyq migrate throughput: N jobs from one backend to another on a local Spark session.

    python -m bench.studies.migrate [--jobs 100000] [--queues 4] [--batch-size N]
                                    [--master local[2]] [--from sqlite|redis|postgres]
                                    [--to sqlite|redis|postgres] [--redis URL]
                                    [--postgres URL] [--read auto|driver|tasks]
                                    [--wave-pages N] [--partitions N] [--source-file PATH]

`sqlite` is a fresh file in a temporary folder; `redis` is a fresh key prefix on --redis
(default redis://127.0.0.1:6379/0), whose keys are deleted at the end; `postgres` is a fresh
schema on --postgres (default postgresql://postgres@127.0.0.1:5432/test), dropped at the end.
`--source-file PATH` (a sqlite source): fill PATH once and keep it; a later run with the same
PATH reads it as it is (no fill), so runs that compare changes share one source.

The source holds N jobs spread over --queues queues, a tenth of them completed with a
return value and a log row (so finished jobs, logs and waiting jobs all move). Prints one
JSON line, then a short table. The Spark session starts before the clock, with its Python
workers (the JVM, then one empty job that starts a worker per partition and imports the task
code: about 8 s here, printed as spark_start_s); the time is the migration alone, including
the destination's final metadata step. Peak
memory: the largest sum of resident sets of this process and all its descendants (the JVM
and Spark's Python workers), sampled from /proc every 100 ms during the migration (Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psyq
from bench.harness.processes import rss_bytes
from bench.harness.stores import KINDS, drop_endpoint, fresh_endpoint
from psyq.backends import open_backend, release_backend
from psyq.backends.base import Completed, FetchRequest
from psyq_migrate import MigrateOptions, migrate, verify_backends
from psyq_migrate.spark import spark_session, start_python_workers


async def fill(url: str, jobs: int, queues: int) -> None:
    per_queue = jobs // queues
    for index in range(queues):
        name = f"q{index}"
        async with psyq.Queue(name, connection=url) as queue:
            for start in range(0, per_queue, 1000):
                count = min(1000, per_queue - start)
                await queue.add_bulk(
                    [
                        {"name": "work", "data": {"i": start + i, "pad": "x" * 64}}
                        for i in range(count)
                    ]
                )
        await finish_some(url, name, per_queue // 10)


async def finish_some(url: str, queue: str, count: int) -> None:
    backend = await open_backend(url)
    try:
        for start in range(0, count, 100):
            tokens = [f"t{start + i}" for i in range(min(100, count - start))]
            taken = await backend.move_to_active(queue, FetchRequest(tokens, 60_000))
            for record, token in zip(taken, tokens, strict=True):
                await backend.add_log(queue, record.id, "done", None)
                await backend.move_to_finished(queue, record.id, token, Completed('{"ok": true}'))
    finally:
        await release_backend(backend)


def process_tree(root: int) -> set[int]:
    """`root` and every descendant (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {root}, True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return tree


def rss_kib(pid: int) -> int:
    try:
        return rss_bytes(pid) // 1024
    except OSError:
        return 0  # ended meanwhile


class PeakSampler(threading.Thread):
    """The peak of the summed resident memory of this process and its descendants, sampled
    every 100 ms. The tree is listed again once a second (a walk of every process in /proc
    costs ~5 ms of CPU in the driver; a sample of the tree alone, a few files)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        tree: set[int] = set()
        for tick in itertools.count():
            if tick % 10 == 0:
                tree = process_tree(os.getpid())
            self.peak_kib = max(self.peak_kib, sum(rss_kib(pid) for pid in tree))
            if self.stop.wait(0.1):
                return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=None)  # None: by destination
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--from", dest="source", choices=KINDS, default="sqlite")
    parser.add_argument("--to", dest="destination", choices=KINDS, default="sqlite")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--read", choices=("auto", "driver", "tasks"), default="auto")
    parser.add_argument("--wave-pages", type=int, default=None)
    parser.add_argument("--source-file", type=Path, default=None)
    args = parser.parse_args()
    if args.source_file is not None and args.source != "sqlite":
        parser.error("--source-file is for a sqlite source")
    folder = Path(tempfile.mkdtemp(prefix="psyq-bench-migrate-"))
    source = fresh_endpoint(args.source, "benchmigsrc", args.redis, args.postgres, folder)
    if args.source_file is not None:
        source = f"sqlite:///{args.source_file.resolve()}"
    destination = fresh_endpoint(args.destination, "benchmigdst", args.redis, args.postgres, folder)
    try:
        run(args, source, destination)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for url in (source, destination):
            asyncio.run(drop_endpoint(url))


def run(args: argparse.Namespace, source: str, destination: str) -> None:
    started = time.perf_counter()
    if args.source_file is None or not args.source_file.exists():
        asyncio.run(fill(source, args.jobs, args.queues))
    fill_s = time.perf_counter() - started
    started = time.perf_counter()
    with spark_session(args.master, "psyq-bench") as spark:
        start_python_workers(spark, args.partitions or spark.sparkContext.defaultParallelism)
        spark_s = time.perf_counter() - started
        read = {"auto": None, "driver": False, "tasks": True}[args.read]
        options = MigrateOptions(
            source,
            destination,
            batch_size=args.batch_size,
            read_in_tasks=read,
            pages_per_task=args.wave_pages,
            partitions=args.partitions,
        )
        sampler = PeakSampler()
        sampler.start()
        started = time.perf_counter()
        result = migrate(options, spark)
        seconds = time.perf_counter() - started
        sampler.stop.set()
        started = time.perf_counter()
        report = verify_backends(source, destination)
        verify_s = time.perf_counter() - started
    assert report.ok and sum(r.destination.count for r in report.rows) == args.jobs, "verify failed"
    figures = {
        "jobs": result.total,
        "queues": len(result.plans),
        "waves": result.waves,
        "migrate_s": round(seconds, 2),
        "jobs_per_s": round(result.total / seconds),
        "verify_s": round(verify_s, 2),
        "fill_s": round(fill_s, 2),
        "spark_start_s": round(spark_s, 2),
        "peak_rss_all_processes_mib": round(sampler.peak_kib / 1024),
        "python": platform.python_version(),
        "master": args.master,
        "from": args.source,
        "to": args.destination,
        "read": args.read,
    }
    print(json.dumps(figures))
    for key, value in figures.items():
        print(f"{key:>28}  {value}")


if __name__ == "__main__":
    main()
