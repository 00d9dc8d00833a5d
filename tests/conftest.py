"""Shared test helpers (kept small; suites add their own fixtures)."""

from __future__ import annotations

import uuid

import pytest

# Session fixtures of the servers tests share (one per run), visible to every suite.
from tests.redis_service import redis_cluster, redis_server  # noqa: F401
from tests.tcp.server_proc import psyq_memory_server_url, psyq_server_url  # noqa: F401


def fresh_name(prefix: str = "q") -> str:
    """A queue name nobody else uses: tests never flush a whole store."""
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def queue_name() -> str:
    return fresh_name()
