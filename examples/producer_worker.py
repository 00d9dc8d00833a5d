"""A producer and a worker in one script: add ten jobs, process them five at a time.

    python examples/producer_worker.py          # PSYQ_URL, else sqlite:///psyq.db here

In a real deployment the two halves run in different processes (the worker usually as
`psyq worker module:function --queue emails`); the code of each is the same.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psyq

QUEUE = os.environ.get("PSYQ_QUEUE", "emails")


async def send(job: psyq.Job) -> dict[str, Any]:
    await asyncio.sleep(0.01)  # the email going out
    await job.update_progress(100)
    return {"sent": job.data["to"]}


async def main() -> None:
    async with psyq.Queue(QUEUE) as queue:  # connection: PSYQ_URL, else psyq's default
        jobs = await queue.add_bulk(
            [{"name": "send", "data": {"to": f"user{i}@example.com"}} for i in range(10)]
        )
        waiting = {job.id for job in jobs}
        done = asyncio.Event()
        results: dict[str, Any] = {}

        def completed(job: psyq.Job, result: Any) -> None:
            if job.id in waiting:
                results[job.id] = result
                if len(results) == len(waiting):
                    done.set()

        async with psyq.Worker(QUEUE, send, concurrency=5) as worker:
            worker.on("completed", completed)
            await asyncio.wait_for(done.wait(), timeout=30)
    print(f"{len(results)} emails sent; job {jobs[0].id}: {results[jobs[0].id]}")


if __name__ == "__main__":
    asyncio.run(main())
