"""Redis-specific tests: the stored layout, script loading, server checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

import psyq
from tests.conformance.conftest import redis_url
from tests.redis_service import redis_server  # noqa: F401 - the session fixture


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    return redis_url(request)


@pytest.fixture
async def raw(url: str) -> AsyncIterator[Any]:
    """A plain redis-py client on the test server, to read what psyq stored."""
    client = Redis.from_url(url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def queue(url: str, queue_name: str) -> AsyncIterator[psyq.Queue]:
    q = psyq.Queue(queue_name, connection=url)
    try:
        yield q
    finally:
        await q.close()
