"""Processors for the CLI tests (imported by `psyq worker` in a subprocess).

With PSYQ_TEST_SEED set, importing this module adds one slow job to queue "q" of memory://
(the engine is per process, so the worker process seeds its own queue).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psyq
import psyq.sync

not_callable = 42


async def slow_job(job: psyq.Job) -> str:
    """Write `<marker>.started`, sleep, then write `<marker>.done`."""
    marker = os.environ["PSYQ_TEST_MARKER"]
    Path(marker + ".started").write_text(job.id)
    await asyncio.sleep(float(job.data.get("seconds", 1)))  # sleep: the job's work
    Path(marker + ".done").write_text(job.id)
    return "slept"


if os.environ.get("PSYQ_TEST_SEED"):
    psyq.sync.Queue("q", connection="memory://").add("slow", {"seconds": 1.5})
