"""Helpers shared by the Python peers of bench/run.py (each peer imports this file from its
own virtualenv, so it uses the standard library only).

Every peer prints one JSON line of figures with the keys bench/run.py reads:
version, add_single, add_bulk, c10, c100 (jobs/s), latency {p50, p99} (ms), and where the
library has them flows {added, processed} (trees/s) and bytes_per_waiting_job; plus
notes, a list of strings printed under the table.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

BATCH = 1000


def run_id(peer: str) -> str:
    """A fresh name part for this run's queues and keys."""
    return f"{peer}-bench-{uuid.uuid4().hex[:8]}"


def per_second(count: int, started: float) -> float:
    return count / (time.perf_counter() - started)


def config() -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    defaults = {"jobs": 20000, "single": 5000, "rate": 500, "seconds": 3, "trees": 1000}
    return {**defaults, "memoryJobs": 100_000, **cfg}


async def timed_loop(count: int, add_one: Callable[[int], Awaitable[Any]]) -> float:
    """Jobs/s of `await add_one(i)` for i in range(count), one after the other."""
    started = time.perf_counter()
    for i in range(count):
        await add_one(i)
    return per_second(count, started)


async def timed_batches(count: int, add_batch: Callable[[range], Awaitable[Any]]) -> float:
    """Jobs/s of `await add_batch(indexes)` over batches of BATCH indexes."""
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        await add_batch(range(start, min(count, start + BATCH)))
    return per_second(count, started)


async def steady_adds(rate: int, seconds: float, add: Callable[[], Awaitable[Any]]) -> int:
    """Call `add()` at a steady `rate` per second for `seconds`; the number of adds."""
    total = int(rate * seconds)
    started = time.perf_counter()
    for i in range(total):
        pause = started + i / rate - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        await add()
    return total


async def wait_for_samples(samples: Sequence[float], total: int, timeout: float = 60) -> None:
    deadline = time.perf_counter() + timeout
    while len(samples) < total and time.perf_counter() < deadline:
        await asyncio.sleep(0.005)


def percentiles_ms(samples: Sequence[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds of latencies given in seconds."""
    ordered = sorted(samples)
    if not ordered:
        return {"p50": float("nan"), "p99": float("nan")}

    def pick(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000

    return {"p50": pick(0.5), "p99": pick(0.99)}


class Countdown:
    """Set `done` when `hit()` has been called `target` times."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.done = asyncio.Event()

    def hit(self, *_: Any) -> None:
        self.count += 1
        if self.count >= self.target:
            self.done.set()


async def used_memory(redis: Any) -> int:
    """The Redis server's INFO used_memory (jobs live in the server)."""
    return int((await redis.info("memory"))["used_memory"])


async def delete_matching(redis: Any, pattern: str) -> int:
    """Delete the keys matching `pattern` (SCAN + DEL in chunks; never FLUSHDB)."""
    deleted = 0
    chunk: list[Any] = []
    async for key in redis.scan_iter(match=pattern, count=1000):
        chunk.append(key)
        if len(chunk) >= 1000:
            deleted += await redis.delete(*chunk)
            chunk.clear()
    if chunk:
        deleted += await redis.delete(*chunk)
    return deleted


def log(message: str) -> None:
    """Progress on stderr (bench/run.py shows its tail when a peer fails)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


async def step(name: str, work: Awaitable[Any]) -> Any:
    """Await one workload, logging its start and its result."""
    log(f"{name} ...")
    result = await work
    log(f"{name}: {result}")
    return result


def emit(figures: dict[str, Any]) -> None:
    print(json.dumps(figures), flush=True)
