"""A QueueEvents (or Queue) opened by two calls at once holds its backend once: closing it
closes the backend (a use counted twice left it, and its connections, open for good; under
uvloop a loop closed with such a connection open never returned)."""

from __future__ import annotations

import asyncio

import pytest

import psyq
from psyq.backends import _OPEN


async def test_concurrent_first_calls_share_one_use(psyq_server_url: str, queue_name: str) -> None:
    url = psyq_server_url
    events = psyq.QueueEvents(queue_name, connection=url)  # its reader task opens the backend
    with pytest.raises(psyq.JobNotFoundError):  # ... while this call opens it too
        await events.wait_job_finished("1", timeout=1)
    await events.close()
    assert url not in _OPEN.get(asyncio.get_running_loop(), {})
