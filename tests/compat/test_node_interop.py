"""A job written by Node BullMQ, processed by a psyq.compat.bullmq Worker on the same queue
(Redis with BullMQ 5 and 6, Postgres with BullMQ 6); Node BullMQ then reads the result
back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from psyq.compat.bullmq import Job, Queue, Worker
from tests.conftest import fresh_name
from tests.interop.conftest import (  # noqa: F401 - the fixtures
    Sides,
    bullmq_installs,
    interop_pg_schema,
    node_drivers,
    sides,
)
from tests.postgres.conftest import pg_server  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(300)


async def test_node_job_processed_by_compat_worker(
    sides: Sides,  # noqa: F811 - the imported fixture
) -> None:
    name = fresh_name("compat-interop")
    job_id = await sides.node.add(name, "resize", {"w": 640}, {"attempts": 2, "priority": 1})
    opts = {"connection": sides.psyq.url}
    finished: asyncio.Future[tuple[Job, Any]] = asyncio.get_running_loop().create_future()

    async def resize(job: Job, token: str) -> dict[str, int]:
        return {"w": job.data["w"] // 2, "attempts": job.attempts, "priority": job.priority}

    queue = Queue(name, opts)
    worker = Worker(name, resize, opts)
    worker.on("completed", lambda job, result: finished.set_result((job, result)))
    try:
        job, result = await asyncio.wait_for(finished, 20)
        assert result == {"w": 320, "attempts": 2, "priority": 1}
        assert (job.id, job.name, job.attemptsMade) == (job_id, "resize", 1)
        stored = await Job.fromId(queue, job_id)
        assert stored is not None and stored.returnvalue == result
    finally:
        await worker.close()
        await queue.close()
    seen = await sides.node.job(name, job_id)
    assert seen is not None
    assert (seen["state"], seen["returnvalue"], seen["attemptsMade"]) == ("completed", result, 1)
