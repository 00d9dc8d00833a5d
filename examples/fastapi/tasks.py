"""The processor of examples/fastapi: `psyq worker tasks:report --queue reports`."""

from __future__ import annotations

import asyncio
from typing import Any

import psyq


async def report(job: psyq.Job) -> dict[str, Any]:
    """Work in `steps` steps, reporting progress after each (percent done)."""
    steps = int(job.data.get("steps", 4))
    for step in range(1, steps + 1):
        await asyncio.sleep(float(job.data.get("pause", 0.05)))  # the work of one step
        await job.update_progress(round(100 * step / steps))
    if job.data.get("fail"):
        raise RuntimeError(f"report {job.id} failed on purpose")
    return {"pages": steps, "title": job.data.get("title", "report")}
