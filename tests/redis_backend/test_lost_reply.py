"""A settle whose script ran but whose reply was lost with the connection: the worker
reports the lost connection (its `error` event, as for any), retries the settle, and the
retry, refused because the job is no longer active, recognises that its own earlier
attempt completed the job (same lease, now completed): the worker emits `completed`, as it
does on Postgres (tests/postgres/test_lost_reply.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import psyq
from psyq.backends.redis import RedisBackend
from tests.conftest import fresh_name


@pytest.mark.timeout(60)
async def test_a_settle_whose_reply_was_lost_reports_completed(url: str) -> None:
    name = fresh_name("lost-reply")
    backend = RedisBackend(url)
    await backend.open()
    armed, fired = False, 0
    original = backend._run

    async def run(script: str, queue: str, *args: Any) -> Any:
        nonlocal armed, fired
        result = await original(script, queue, *args)
        if armed and script == "moveToFinished":
            armed, fired = False, fired + 1
            raise backend._lost("script moveToFinished (reply lost)", ConnectionResetError())
        return result

    backend._run = run  # type: ignore[method-assign]
    completed: list[str] = []
    errors: list[BaseException] = []
    try:
        async with psyq.Queue(name, connection=backend) as queue:
            job = await queue.add("x", {"n": 1})

            async def process(running: psyq.Job) -> int:
                nonlocal armed
                armed = True
                return 2

            worker = psyq.Worker(name, process, connection=backend, lock_duration=60_000)
            worker.on("completed", lambda done, result: completed.append(done.id))
            worker.on("error", errors.append)
            try:
                deadline = time.monotonic() + 20
                while not completed and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
            finally:
                await worker.close()
            assert await queue.get_job_state(job.id) == "completed"
    finally:
        await backend.close()
    assert fired == 1
    assert completed == [job.id]
    assert errors and all(isinstance(error, psyq.ConnectionError) for error in errors)
