"""psyq's side of every row of the runner: each workload against one URL, and `run_psyq`,
the whole set (the peers run the same workloads in their own scripts, bench/peers/<name>/).
The studies take their fills, drains and no-op processor from here."""

from __future__ import annotations

import asyncio
import gc
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psyq
from bench.harness.processes import rss_bytes
from bench.harness.stores import redis_used_memory
from bench.peers.peerlib import BATCH, Countdown, percentiles_ms, steady_adds


def fresh(label: str) -> str:
    """A fresh queue name, its own hash tag in braces (`bench-{c10-1a2b3c4d}`): on a Redis
    Cluster every queue has a slot of its own; queues of one flow share `label`'s tag."""
    return f"bench-{{{label}-{uuid.uuid4().hex[:8]}}}"


async def fill(queue: psyq.Queue, count: int, opts: dict[str, Any] | None = None) -> float:
    """Add `count` jobs `{"i": n}` (with `opts` when given) in add_bulk calls of BATCH;
    jobs added per second."""
    started = time.perf_counter()
    extra = {} if opts is None else {"opts": opts}
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        await queue.add_bulk(
            [{"name": "x", "data": {"i": start + i}, **extra} for i in range(size)]
        )
    return count / (time.perf_counter() - started)


async def add_single(url: str, count: int) -> float:
    async with psyq.Queue(fresh("single"), connection=url) as queue:
        started = time.perf_counter()
        for i in range(count):
            await queue.add("x", {"i": i})
        rate = count / (time.perf_counter() - started)
        await queue.obliterate()
    return rate


async def add_bulk(url: str, count: int) -> float:
    async with psyq.Queue(fresh("bulk"), connection=url) as queue:
        rate = await fill(queue, count)
        await queue.obliterate()
    return rate


async def noop(job: psyq.Job) -> None:
    return None


async def processing(url: str, count: int, concurrency: int) -> float:
    async with psyq.Queue(fresh(f"c{concurrency}"), connection=url) as queue:
        await fill(queue, count)
        seconds = await drain(url, queue, count, concurrency)
        await queue.obliterate()
    return count / seconds


async def drain(
    url: str,
    queue: psyq.Queue,
    count: int,
    concurrency: int,
    probe: Callable[[], Awaitable[object]] | None = None,
) -> float:
    """Seconds a Worker of `concurrency` takes to complete the `count` jobs of `queue`;
    `probe()` is awaited just before it starts and just after the last completion."""
    completions = Countdown(count)
    if probe is not None:
        await probe()
    started = time.perf_counter()
    worker = psyq.Worker(queue.name, noop, connection=url, concurrency=concurrency)
    worker.on("completed", completions.hit)
    try:
        await asyncio.wait_for(completions.done.wait(), timeout=max(120.0, count / 100))
    except TimeoutError:  # say what the store holds rather than hang the whole run
        counts = await queue.get_job_counts("waiting", "active", "completed", "failed")
        raise RuntimeError(
            f"c{concurrency}: the worker reported {completions.count} of {count} completions; "
            f"the queue holds {counts}"
        ) from None
    seconds = time.perf_counter() - started
    if probe is not None:
        await probe()
    await worker.close()
    return seconds


async def latency(url: str, rate: int, seconds: float, concurrency: int = 10) -> dict[str, float]:
    samples: list[float] = []

    async def record(job: psyq.Job) -> None:
        samples.append(time.perf_counter() - job.data["t"])

    async with psyq.Queue(fresh("latency"), connection=url) as queue:
        worker = psyq.Worker(queue.name, record, connection=url, concurrency=concurrency)
        await worker.wait_until_ready()
        await warm_up(queue, samples)
        total = await steady_adds(rate, seconds, lambda: queue.add("x", {"t": time.perf_counter()}))
        while len(samples) < total:
            await asyncio.sleep(0.005)
        await worker.close()
        await queue.obliterate()
    return percentiles_ms(samples)


async def warm_up(queue: psyq.Queue, samples: list[float]) -> None:
    """One job through before the timed adds, on every side of the latency row: it
    measures a running worker (its connections open, its statements prepared), not its start."""
    await queue.add("x", {"t": time.perf_counter()})
    while not samples:
        await asyncio.sleep(0.001)
    samples.clear()


def flow_tree(parents: str, children: str, i: int) -> dict[str, Any]:
    kids = [{"name": "child", "queue_name": children, "data": {"k": k}} for k in range(10)]
    return {"name": "parent", "queue_name": parents, "data": {"i": i}, "children": kids}


async def flows(url: str, trees: int) -> dict[str, float]:
    """Trees of 1 parent + 10 children: added per second, and run to the end per second."""
    tag = fresh("flows")  # one slot for both queues: a flow's scripts touch both
    parents, children = f"{tag}parents", f"{tag}children"
    async with psyq.FlowProducer(connection=url) as producer:
        started = time.perf_counter()
        for start in range(0, trees, 100):
            size = min(100, trees - start)
            await producer.add_bulk([flow_tree(parents, children, start + i) for i in range(size)])
        added = trees / (time.perf_counter() - started)
    finished = Countdown(trees)
    started = time.perf_counter()
    kids = psyq.Worker(children, noop, connection=url, concurrency=100)
    tops = psyq.Worker(parents, noop, connection=url, concurrency=100)
    tops.on("completed", finished.hit)
    await finished.done.wait()
    processed = trees / (time.perf_counter() - started)
    await kids.close()
    await tops.close()
    return {"added": added, "processed": processed}


async def memory_per_job(url: str, count: int, pid: int | str = "self") -> float:
    """RSS growth per waiting job of process `pid` (this one, or the server's); on Redis,
    the server's used_memory (the jobs live there)."""
    if url.startswith(("redis://", "rediss://")):
        before = await redis_used_memory(url)
        async with psyq.Queue(fresh("memory"), connection=url) as queue:
            await fill(queue, count)
            per_job = (await redis_used_memory(url) - before) / count
            await queue.obliterate()
        return per_job
    gc.collect()
    before = rss_bytes(pid)
    async with psyq.Queue(fresh("memory"), connection=url) as queue:
        await fill(queue, count)
        gc.collect()
        per_job = (rss_bytes(pid) - before) / count
        await queue.obliterate()
    return per_job


async def run_psyq(url: str, cfg: dict[str, Any], server_pid: int | None) -> dict[str, Any]:
    return {
        "add_single": await add_single(url, cfg["single"]),
        "add_bulk": await add_bulk(url, cfg["jobs"]),
        "c10": await processing(url, cfg["jobs"], 10),
        "c100": await processing(url, cfg["jobs"], 100),
        "latency": await latency(url, cfg["rate"], cfg["seconds"]),
        "flows": await flows(url, cfg["trees"]),
        "bytes_per_waiting_job": await memory_per_job(url, cfg["memoryJobs"], server_pid or "self")
        if server_pid or "://" not in url or url.startswith(("memory:", "sqlite:", "redis"))
        else math.nan,
    }
