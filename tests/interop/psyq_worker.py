"""The psyq side of the Postgres interop tests: a processor Node's scripts expect, and a
worker that runs until a number of jobs finished."""

from __future__ import annotations

import asyncio
from typing import Any

import psyq


async def process(job: psyq.Job) -> dict[str, Any]:
    if job.data.get("fail"):
        raise ValueError("psyq says no")
    return {"doubled": job.data["n"] * 2, "name": job.name}


async def run_psyq_worker(queue_name: str, url: str, finished: int) -> None:
    """Process until `finished` jobs completed or failed for good."""
    done: list[str] = []
    all_done = asyncio.Event()

    def finish(job: psyq.Job) -> None:
        done.append(job.id)
        if len(done) >= finished:
            all_done.set()

    def failed(job: psyq.Job, error: BaseException) -> None:
        if job.attempts_made >= job.opts.get("attempts", 1):
            finish(job)

    worker = psyq.Worker(queue_name, process, connection=url)
    worker.on("completed", lambda job, result: finish(job))
    worker.on("failed", failed)
    try:
        await asyncio.wait_for(all_done.wait(), 20)
    finally:
        await worker.close()
