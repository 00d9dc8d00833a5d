"""psyq migrate throughput: N jobs from one SQLite file to another on a local Spark session.

    python bench/migrate.py [--jobs 100000] [--queues 4] [--batch-size 1000] [--master local[2]]

The source holds N jobs spread over --queues queues, a tenth of them completed with a
return value and a log row (so finished jobs, logs and waiting jobs all move). Prints one
JSON line, then a short table. The Spark session starts before the clock (about 5 s here);
the time is the migration alone, including the destination's final metadata step. Peak
memory: the largest sum of resident sets of this process and all its descendants (the JVM
and Spark's Python workers), sampled from /proc every 100 ms during the migration (Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import Completed, FetchRequest
from psyq_migrate import MigrateOptions, migrate, verify_backends
from psyq_migrate.spark import spark_session


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


def tree_rss_kib(root: int) -> int:
    """Resident KiB of `root` and every descendant (from /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        line = next((ln for ln in status.splitlines() if ln.startswith("VmRSS:")), "VmRSS: 0 kB")
        rss[int(entry)] = int(line.split()[1])
    tree, grew = {root}, True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return sum(rss.get(pid, 0) for pid in tree)


class PeakSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.peak_kib = max(self.peak_kib, tree_rss_kib(os.getpid()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="psyq-bench-migrate-"))
    try:
        run(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(args: argparse.Namespace, folder: Path) -> None:
    source, destination = f"sqlite:///{folder}/src.db", f"sqlite:///{folder}/dst.db"
    started = time.perf_counter()
    asyncio.run(fill(source, args.jobs, args.queues))
    fill_s = time.perf_counter() - started
    with spark_session(args.master, "psyq-bench") as spark:
        options = MigrateOptions(source, destination, batch_size=args.batch_size)
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
        "peak_rss_all_processes_mib": round(sampler.peak_kib / 1024),
        "python": platform.python_version(),
        "master": args.master,
    }
    print(json.dumps(figures))
    for key, value in figures.items():
        print(f"{key:>28}  {value}")


if __name__ == "__main__":
    sys.exit(main())
