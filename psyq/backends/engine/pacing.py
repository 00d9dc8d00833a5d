"""The embedded stores give the event loop turns.

A call on the engine (`memory://`, `sqlite:///` buffered) runs at once and awaits
nothing, so a loop of `await queue.add(...)` never let its event loop turn: the process's
other tasks, timers (a Worker's lock renewal and stalled checks), signal handlers and
health probes waited for the whole loop (a side task sleeping 10 ms ticked 0 times in
2.5 s of adds). `pace` wraps every coroutine method of an adapter class: once TURN_S has
passed since the adapter last gave a turn, its next call yields to the loop once
(`asyncio.sleep(0)`) before it runs. The turn comes before the call's change, so a task
cancelled there changed nothing. Calls within TURN_S of a turn cost the wrapper's call
and one clock read (about 2,000 instructions, 4 % of a memory add: bench log 2026-12-02).

`unpace(adapter)` turns it off for one adapter: psyq's server runs each request it reads at
once, in the order they came, and its loop turns between the frames it reads.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["TURN_S", "pace", "unpace"]

TURN_S = 0.002  # the longest a loop of embedded calls keeps the event loop to itself

Method = Callable[..., Coroutine[Any, Any, Any]]
_clock = time.monotonic
_LIFECYCLE = frozenset({"open", "close"})


def pace(cls: type) -> None:
    """Pace every public coroutine method of `cls` (its own and those it inherits)."""
    cls._turn_at = 0.0  # type: ignore[attr-defined]  # monotonic time of the next turn
    for name, method in inspect.getmembers(cls, inspect.iscoroutinefunction):
        if not name.startswith("_") and name not in _LIFECYCLE:
            setattr(cls, name, _paced(method))


def unpace(adapter: object) -> None:
    """The calls of `adapter` (of a paced class) never give the loop a turn."""
    if hasattr(adapter, "_turn_at"):
        adapter._turn_at = math.inf


def _paced(method: Method) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        coro = method(self, *args, **kwargs)
        if _clock() < self._turn_at:
            return coro
        self._turn_at = _clock() + TURN_S
        return _after_a_turn(coro)

    return call


async def _after_a_turn(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        await asyncio.sleep(0)
    except BaseException:
        coro.close()  # cancelled during the turn: the call never ran
        raise
    return await coro
