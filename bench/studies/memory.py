"""Memory of the embedded stores: what a processed job, a waiting job and an open cost.

    python -m bench.studies.memory [--rounds 3] [--processed 300000] [--waiting 200000]
                                   [--reopen 1000000]
                                   [--only processed,waiting,backlog,server,reopen]

Rows (each measurement runs in a fresh process; resident memory is VmRSS; 60-byte data):
- processed: sqlite:/// (buffered): a producer keeps ~5,000 jobs waiting while a worker at
  concurrency 50 processes `--processed` jobs, finished jobs kept (BullMQ's default). Bytes
  of resident memory grown per processed job, from after a warm-up of 10,000 jobs.
- waiting: `--waiting` jobs added (add_bulk of 1,000) to an empty queue; bytes grown per
  waiting job, on sqlite:/// and on memory://.
- backlog: 50,000 jobs added, then processed at concurrency 10 (jobs/s), on sqlite:/// with
  the default cache (the backlog stays in memory) and with `cache=1000` (most of it is read
  back from the file when taken): what a backlog past the cache costs.
- server: the same waiting jobs added over psyq:// to `psyq server --data FILE`; bytes the
  server's resident memory grew per waiting job.
- reopen: a file holding `--reopen` waiting jobs; a fresh process opens it and asks for the
  queue's counts and its next job: seconds to that first answer and memory grown by it.
Prints one JSON line per round, then the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.figures import row_medians
from bench.harness.processes import ROOT, psyq_server, rss_bytes

DATA = {"to": "someone@example.com", "template": "welcome", "n": 12345}  # ~60 bytes as JSON


def rss() -> int:
    """This process's resident memory, after a collection (no garbage counted)."""
    gc.collect()
    return rss_bytes()


# ---------------------------------------------------------------------- rows (child side)
class Tally:
    """A processor that counts the jobs it ran; `done` is set once `target` have run."""

    def __init__(self, target: int) -> None:
        self.seen = 0
        self.target = target
        self.done = asyncio.Event()

    async def work(self, job: Any) -> int:
        self.seen += 1
        if self.seen >= self.target:
            self.done.set()
        return 1

    def expect(self, more: int) -> None:
        self.target += more
        self.done.clear()


async def processed(url: str, count: int) -> dict[str, Any]:
    import psyq

    async with psyq.Queue("mem", connection=url) as queue:
        tally = Tally(10_000)

        async def produce(total: int) -> None:
            for _ in range(0, total, 1000):
                while (await queue.get_job_counts("waiting"))["waiting"] > 5000:
                    await asyncio.sleep(0.005)
                await queue.add_bulk([{"name": "send", "data": DATA} for _ in range(1000)])

        async with psyq.Worker("mem", tally.work, connection=url, concurrency=50):
            await produce(tally.target)
            await tally.done.wait()
            before = rss()
            started = time.perf_counter()
            tally.expect(count)
            await produce(count)
            await tally.done.wait()
            elapsed = time.perf_counter() - started
        after = rss()
    return {"bytes_per_processed_job": (after - before) / count, "jobs_per_s": count / elapsed}


async def backlog(url: str, count: int) -> dict[str, Any]:
    """A backlog of `count` jobs processed at concurrency 10: jobs/s."""
    import psyq

    async with psyq.Queue("mem", connection=url) as queue:
        await add_waiting(queue, count)
        tally = Tally(count)
        started = time.perf_counter()
        async with psyq.Worker("mem", tally.work, connection=url, concurrency=10):
            await tally.done.wait()
        return {"jobs_per_s": count / (time.perf_counter() - started)}


async def waiting(url: str, count: int) -> dict[str, Any]:
    import psyq

    async with psyq.Queue("mem", connection=url) as queue:
        await queue.add_bulk([{"name": "send", "data": DATA} for _ in range(1000)])
        before = rss()
        await add_waiting(queue, count)
        after = rss()
    return {"bytes_per_waiting_job": (after - before) / count}


async def add_waiting(queue: Any, count: int) -> None:
    for _ in range(0, count, 1000):
        await queue.add_bulk([{"name": "send", "data": DATA} for _ in range(1000)])


async def fill(url: str, count: int) -> dict[str, Any]:
    import psyq

    async with psyq.Queue("mem", connection=url) as queue:
        await add_waiting(queue, count)
    return {}


async def reopen(url: str) -> dict[str, Any]:
    import psyq

    before = rss()
    started = time.perf_counter()
    async with psyq.Queue("mem", connection=url) as queue:
        counts = await queue.get_job_counts("waiting")
        first = await queue.get_waiting(0, 0)
        elapsed = time.perf_counter() - started
        after = rss()
    assert first, "the reopened file has no waiting job"
    return {"first_answer_s": elapsed, "bytes_grown": after - before, "waiting": counts["waiting"]}


async def server_waiting(url: str, count: int, pid: int) -> dict[str, Any]:
    import psyq

    async with psyq.Queue("mem", connection=url) as queue:
        await queue.add_bulk([{"name": "send", "data": DATA} for _ in range(1000)])
        before = rss_bytes(pid)
        await add_waiting(queue, count)
        after = rss_bytes(pid)
    return {"server_bytes_per_waiting_job": (after - before) / count}


def child(row: str, *args: Any) -> dict[str, Any]:
    """Run one row in a fresh interpreter (from the repository's root); its JSON result."""
    code = (
        "import asyncio, json; from bench.studies import memory; "
        f"print(json.dumps(asyncio.run(memory.{row}(*{args!r}))))"
    )
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{row} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------------- driver
def one_round(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    only = set(args.only.split(","))
    if "processed" in only:
        figures["sqlite_processed"] = child("processed", sqlite(folder, "p"), args.processed)
    if "waiting" in only:
        figures["sqlite_waiting"] = child("waiting", sqlite(folder, "w"), args.waiting)
        figures["memory_waiting"] = child("waiting", "memory://", args.waiting)
    if "backlog" in only:  # a backlog the cache holds, and one read back from the file
        figures["sqlite_backlog_in_cache"] = child("backlog", sqlite(folder, "b"), 50_000)
        cold = sqlite(folder, "c") + "?cache=1000"
        figures["sqlite_backlog_from_file"] = child("backlog", cold, 50_000)
    if "server" in only:
        figures["server_waiting"] = server_row(folder, args.waiting)
    if "reopen" in only:
        url = sqlite(folder, "r")
        child("fill", url, args.reopen)
        figures["sqlite_reopen"] = child("reopen", url)
    return figures


def sqlite(folder: Path, name: str) -> str:
    path = folder / f"{name}.db"
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{path}"


def server_row(folder: Path, count: int) -> dict[str, Any]:
    data = folder / "server.db"
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{data}{suffix}").unlink(missing_ok=True)
    with psyq_server(str(data)) as (url, pid):
        return child("server_waiting", url, count, pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processed", type=int, default=300_000)
    parser.add_argument("--waiting", type=int, default=200_000)
    parser.add_argument("--reopen", type=int, default=1_000_000)
    parser.add_argument("--only", default="processed,waiting,backlog,server,reopen")
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="psyq-memory-") as folder:
        for number in range(1, args.rounds + 1):
            figures = one_round(args, Path(folder))
            print(json.dumps({"round": number, **figures}), flush=True)
            rounds.append(figures)
    print(json.dumps({"median_of": len(rounds), **row_medians(rounds)}, indent=1))


if __name__ == "__main__":
    main()
