"""An app that owns a `sqlite:///` file during a live move, for tests/migrate/test_live_kills.py:

    python -m tests.migrate.live_app URL QUEUE JOBS

Adds JOBS durable jobs (0: none, an app restarted after a crash) that B's worker removes
once it ran them, prints `ready` once its first call reached the file (it owns it, or is a
peer of the mover that took it), then holds it until killed."""

from __future__ import annotations

import asyncio
import sys

import psyq


async def main(url: str, queue_name: str, jobs: int) -> None:
    async with psyq.Queue(queue_name, connection=url) as queue:
        opts = {"remove_on_complete": True, "durable": True}
        for start in range(0, jobs, 500):
            batch = range(start, min(jobs, start + 500))
            await queue.add_bulk([{"name": "j", "data": {"n": n}, "opts": opts} for n in batch])
        await queue.get_job_counts()
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
