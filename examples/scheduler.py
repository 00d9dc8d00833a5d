"""A job scheduler: a "tick" job every 200 ms, three times, processed as it comes.

    python examples/scheduler.py                # PSYQ_URL, else sqlite:///psyq.db here

The scheduler lives in the store, not in this process: any worker on the queue runs its
jobs, and upserting it again (same id) replaces it rather than adding a second one.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psyq

QUEUE = os.environ.get("PSYQ_QUEUE", "ticks")
RUNS = 3


async def main() -> None:
    ticks: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def tick(job: psyq.Job) -> int:
        ticks.append(job.data)
        if len(ticks) == RUNS:
            done.set()
        return len(ticks)

    async with psyq.Queue(QUEUE) as queue:
        await queue.upsert_job_scheduler(
            "tick", {"every": 200, "limit": RUNS}, {"name": "tick", "data": {"from": "scheduler"}}
        )
        print(f"schedulers: {[s['key'] for s in await queue.get_job_schedulers()]}")
        async with psyq.Worker(QUEUE, tick):
            await asyncio.wait_for(done.wait(), timeout=30)
        await queue.remove_job_scheduler("tick")
    print(f"{len(ticks)} ticks run: {ticks[0]}")


if __name__ == "__main__":
    asyncio.run(main())
