"""Finishing a coroutine the server started by hand: a request runs its first step at once
(ServerConnection.run_eagerly: most engine calls finish there, answered without a task);
one that suspends is finished here, in a task, as asyncio's own task would."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["drive"]


async def drive(coro: Coroutine[Any, Any, Any], waiting: Any) -> Any:
    """Finish a coroutine that was started by hand and is suspended on `waiting` (the
    future it awaits, or None after a bare yield), as a task would: wait for the future,
    then resume the coroutine, which reads the future's outcome itself."""
    while True:
        throw: BaseException | None = None
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False  # as a task does before waiting
                await waiting
        except asyncio.CancelledError as exc:
            if waiting is None or not waiting.cancelled():
                throw = exc  # cancelled here, not through the future: pass it on
        except BaseException:
            pass  # the future's own error: the coroutine raises it when resumed
        try:
            waiting = coro.send(None) if throw is None else coro.throw(throw)
        except StopIteration as done:
            return done.value
