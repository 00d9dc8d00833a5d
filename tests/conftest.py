"""Shared test helpers (kept small; suites add their own fixtures)."""

from __future__ import annotations

import asyncio
import os
import uuid
import warnings
from collections.abc import Callable

import pytest

# Session fixtures of the servers tests share (one per run), visible to every suite.
from tests.redis_service import (  # noqa: F401
    failover_cluster,
    redis_cluster,
    redis_process,
    redis_server,
    sentinel_group,
)
from tests.server.server_proc import psyq_memory_server_url, psyq_server_url  # noqa: F401


def fresh_name(prefix: str = "q") -> str:
    """A queue name nobody else uses: tests never flush a whole store."""
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def queue_name() -> str:
    return fresh_name()


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The event loop async tests run on: asyncio's, or uvloop's with PSYQ_TEST_LOOP=uvloop
    (`make test` runs part of the conformance suite that way too)."""
    choice = os.environ.get("PSYQ_TEST_LOOP", "asyncio")
    if choice == "uvloop":
        return {"uvloop": _checked_uvloop}
    if choice != "asyncio":
        raise pytest.UsageError(f"PSYQ_TEST_LOOP must be asyncio or uvloop, got {choice!r}")
    return {"asyncio": asyncio.new_event_loop}


def _checked_uvloop() -> asyncio.AbstractEventLoop:
    """A uvloop loop whose close() reports transports left open as one ResourceWarning (an
    error under filterwarnings=error) once they are closed. uvloop warns about each from a
    callback: with warnings as errors that callback fails, the transport stays open and
    close() waits for it forever."""
    import uvloop

    class CheckedLoop(uvloop.Loop):
        def close(self) -> None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                super().close()
            leaked = [str(w.message) for w in caught if w.category is ResourceWarning]
            if leaked:
                warnings.warn(f"the loop closed with {leaked}", ResourceWarning, stacklevel=2)

    return CheckedLoop()
