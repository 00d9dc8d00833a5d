"""Objects of one event loop that name one URL share one backend: callers that ask while it
opens join that open (200 first adds at once open one connection, not 200), and an open
whose callers all leave is stopped, leaving nothing registered."""

from __future__ import annotations

import asyncio

import pytest

from psyq.backends import open_backend, register_backend, release_backend
from psyq.backends.engine.memory import MemoryBackend
from tests.polling import eventually


class SlowOpen(MemoryBackend):
    """The in-process engine with an open that takes a while, as a network store's does."""

    opened: list[SlowOpen] = []
    started = 0
    cancelled = 0

    async def open(self) -> None:
        SlowOpen.started += 1
        try:
            await asyncio.sleep(0.05)  # sleep: the open that takes a while
        except asyncio.CancelledError:
            SlowOpen.cancelled += 1
            raise
        SlowOpen.opened.append(self)
        self.closed = False

    async def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def slow_scheme() -> None:
    register_backend("slowopen", lambda url: SlowOpen("memory://"))
    SlowOpen.opened.clear()
    SlowOpen.started = SlowOpen.cancelled = 0


async def test_callers_asking_while_it_opens_share_one_open() -> None:
    backends = await asyncio.gather(*(open_backend("slowopen://a") for _ in range(200)))
    assert len(SlowOpen.opened) == 1
    assert {id(backend) for backend in backends} == {id(SlowOpen.opened[0])}
    for backend in backends[:-1]:
        await release_backend(backend)
    assert not SlowOpen.opened[0].closed
    await release_backend(backends[-1])
    assert SlowOpen.opened[0].closed


async def test_an_open_whose_callers_all_left_is_stopped() -> None:
    callers = [asyncio.ensure_future(open_backend("slowopen://b")) for _ in range(3)]
    await eventually(lambda: SlowOpen.started == 1, "the open under way")
    callers[0].cancel()
    await asyncio.sleep(0)
    assert SlowOpen.cancelled == 0  # two callers still wait
    for caller in callers[1:]:
        caller.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    await asyncio.sleep(0)
    assert SlowOpen.cancelled == 1 and SlowOpen.opened == []
    backend = await open_backend("slowopen://b")  # nothing half-open was kept
    assert SlowOpen.opened == [backend]
    await release_backend(backend)


class SlowCleanup(MemoryBackend):
    """An open whose cancellation takes a while to undo (a network store closing the
    connection it had made)."""

    started = 0
    undone = 0

    async def open(self) -> None:
        SlowCleanup.started += 1
        try:
            await asyncio.sleep(0.05)  # sleep: the open that takes a while
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # sleep: closing what it had opened takes a while
            SlowCleanup.undone += 1
            raise


async def test_the_last_caller_leaving_returns_once_the_open_is_undone() -> None:
    """Nothing is left to finish after the caller's cancellation returns: a cleanup still
    running then could outlive its event loop (a test's, a script's) and leave its
    connections to the garbage collector."""
    register_backend("slowcleanup", lambda url: SlowCleanup("memory://"))
    SlowCleanup.started = SlowCleanup.undone = 0
    caller = asyncio.ensure_future(open_backend("slowcleanup://c"))
    await eventually(lambda: SlowCleanup.started == 1, "the open under way")
    caller.cancel()
    await asyncio.gather(caller, return_exceptions=True)
    assert caller.cancelled()
    assert SlowCleanup.undone == 1
