"""`psyq demo`: a producer and a worker on the embedded default, with a progress bar and a
summary of what ran.

The jobs are a mix: most complete at once, every 10th fails its first attempt and succeeds on
the retry, every 25th is delayed, every 7th is prioritized.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import psyq
from psyq.backends import resolve_url
from psyq.errors import redact_url

__all__ = ["run_demo"]


@dataclass
class Tally:
    """What the demo saw: counts, and per-job wait and run times in ms."""

    completed: int = 0
    failed: int = 0
    retried: int = 0
    waits: list[int] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)

    @property
    def finished(self) -> int:
        return self.completed + self.failed


class CountRetries:
    """A tiny plugin: the demo learns about retries through the middleware hooks."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    @psyq.hookimpl
    def psyq_job_retried(self, job: psyq.Job, error: BaseException, delay: int) -> None:
        self.tally.retried += 1


def demo_jobs(count: int) -> list[dict[str, Any]]:
    jobs = []
    for i in range(count):
        opts: dict[str, Any] = {"attempts": 2, "backoff": {"type": "fixed", "delay": 20}}
        if i % 25 == 0:
            opts["delay"] = 200
        if i % 7 == 0:
            opts["priority"] = 1 + i % 3
        jobs.append({"name": "flaky" if i % 10 == 3 else "resize", "data": {"n": i}, "opts": opts})
    return jobs


async def process(job: psyq.Job) -> dict[str, Any]:
    await asyncio.sleep(random.random() / 500)  # up to 2 ms of "work"
    if job.name == "flaky" and job.attempts_made == 0:
        raise RuntimeError("flaky job: first attempt fails, the retry succeeds")
    return {"n": job.data["n"], "square": job.data["n"] ** 2}


async def run_demo(count: int, concurrency: int, connection: str | None) -> int:
    console = Console()
    tally = Tally()
    name = f"demo-{uuid.uuid4().hex[:8]}"
    console.print(f"psyq demo: queue {name!r} on {redact_url(resolve_url(connection))}")
    started = time.perf_counter()
    async with psyq.Queue(name, connection=connection) as queue:
        jobs = demo_jobs(count)
        for start in range(0, count, 1000):
            await queue.add_bulk(jobs[start : start + 1000])
        await _work(queue, concurrency, connection, tally, count, console)
        counts = await queue.get_job_counts()
        await queue.obliterate()
    elapsed = time.perf_counter() - started
    console.print(_summary(count, tally, counts, elapsed))
    return 0 if tally.completed == count else 1


async def _work(
    queue: psyq.Queue,
    concurrency: int,
    connection: str | None,
    tally: Tally,
    count: int,
    console: Console,
) -> None:
    done = asyncio.Event()
    columns = (
        TextColumn("processing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("jobs", total=count)

        def on_completed(job: psyq.Job, result: Any) -> None:
            tally.completed += 1
            _timings(job, tally)
            progress.advance(bar)
            if tally.finished >= count:
                done.set()

        worker = psyq.Worker(
            queue.name,
            process,
            connection=connection,
            concurrency=concurrency,
            plugins=[CountRetries(tally)],
        )
        worker.on("completed", on_completed)
        try:
            await done.wait()
        finally:
            await worker.close()


def _timings(job: psyq.Job, tally: Tally) -> None:
    if job.processed_on is None:
        return
    now = time.time_ns() // 1_000_000
    due = job.timestamp + (job.opts.get("delay") or 0)
    tally.waits.append(max(0, job.processed_on - due))
    tally.runs.append(max(0, now - job.processed_on))


def percentile(values: list[int], fraction: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _summary(count: int, tally: Tally, counts: dict[str, int], elapsed: float) -> Table:
    table = Table(title="psyq demo summary")
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("jobs added", str(count)),
        ("completed", str(tally.completed)),
        ("failed", str(counts.get("failed", 0))),
        ("retried (then completed)", str(tally.retried)),
        ("elapsed", f"{elapsed:.2f} s"),
        ("throughput", f"{tally.completed / elapsed:,.0f} jobs/s"),
        ("wait p50 / p99", f"{percentile(tally.waits, 0.5)} / {percentile(tally.waits, 0.99)} ms"),
        ("run p50 / p99", f"{percentile(tally.runs, 0.5)} / {percentile(tally.runs, 0.99)} ms"),
    ]
    for row in rows:
        table.add_row(*row)
    return table
