"""What a Worker needs to know about a processor: whether it is a coroutine function (run on
the event loop) or a plain one (run in a thread), and whether it takes the lock token."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["Processor", "is_async", "wants_token"]

Processor = Callable[..., Any]


def wants_token(processor: Processor) -> bool:
    """Whether `processor` takes the lock token too: `(job, token)`, as in BullMQ."""
    try:
        params = inspect.signature(processor).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def is_async(processor: Processor) -> bool:
    """Whether calling `processor` gives a coroutine (it runs on the loop, not in a thread)."""
    call = getattr(processor, "__call__", None)  # noqa: B004 - callable objects
    return inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(call)
