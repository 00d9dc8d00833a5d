"""The suite runs on the loop PSYQ_TEST_LOOP names (tests/conftest.py): this says it does."""

from __future__ import annotations

import asyncio
import os

import psyq


async def test_the_suite_runs_on_the_chosen_loop(queue: psyq.Queue) -> None:
    loop = asyncio.get_running_loop()
    if os.environ.get("PSYQ_TEST_LOOP", "asyncio") == "uvloop":
        import uvloop

        assert isinstance(loop, uvloop.Loop), loop
    else:
        assert type(loop).__module__.startswith("asyncio"), loop
    job = await queue.add("x", {"on": type(loop).__name__})
    assert (await queue.get_job(job.id)).data == {"on": type(loop).__name__}
