"""Subprocess programs for the SQLite crash and ownership tests (run with `python -m`)."""

from __future__ import annotations

import asyncio
import sys

import psyq


async def write_load(url: str, mode: str) -> None:
    """Add jobs one by one forever, printing each acknowledged id (the parent kills us)."""
    async with psyq.Queue("crash", connection=url) as queue:
        if mode == "complete":
            worker = psyq.Worker("crash", lambda job: job.id, connection=url, concurrency=10)
            worker.on("completed", lambda job, result: print(f"done {job.id}", flush=True))
        i = 0
        while True:
            job = await queue.add("x", {"i": i})
            print(f"added {job.id}", flush=True)
            i += 1
            if i % 50 == 0:
                await asyncio.sleep(0)


async def hold(url: str) -> None:
    """Open the database and keep it open until killed."""
    async with psyq.Queue("held", connection=url) as queue:
        await queue.add("x")
        print("ready", flush=True)
        await asyncio.sleep(3600)  # sleep: until killed


if __name__ == "__main__":
    command, url, *rest = sys.argv[1:]
    if command == "load":
        asyncio.run(write_load(url, rest[0] if rest else "add"))
    else:
        asyncio.run(hold(url))
