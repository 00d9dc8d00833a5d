"""Processors the sandbox tests run in child processes (imported there by name)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import psyq


def work(job: Any) -> dict[str, Any]:
    """Reports progress and a log line; fails its first attempt when asked; returns its pid."""
    job.update_progress(50)
    job.log(f"working on {job.name}")
    if job.data.get("fail_first") and job.attempts_made == 0:
        raise ValueError("first attempt fails")
    if job.data.get("fatal"):
        raise psyq.UnrecoverableError("cannot ever work")
    if job.data.get("crash"):
        os._exit(3)
    if job.data.get("sleep"):
        time.sleep(job.data["sleep"])  # sleep: the job's work
    if job.data.get("not_json"):
        return {"value": object()}
    return {"pid": os.getpid(), "doubled": job.data.get("n", 0) * 2, "group": job.opts.get("group")}


async def async_work(job: Any) -> int:
    await asyncio.sleep(0)
    return int(job.data["n"]) + 1
