"""How the layer's Worker calls its listeners: both the `bullmq` package's and Node's.

Node emits `completed(job, result, prev)`, `failed(job, err, prev)` and `stalled(jobId,
prev)`; the Python package emits the first two (the first one for `stalled`). A listener
gets as many of an event's arguments as it declares (a JavaScript function ignores the
ones it does not name, so a port of `job => ...` works too); one that takes `*args`, or
whose signature cannot be read, gets the package's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["PACKAGE_ARGUMENTS", "ListenerArguments"]

# Events where Node passes more than the package: how many the package passes.
PACKAGE_ARGUMENTS = {"completed": 2, "failed": 2, "stalled": 1}


def _declared(listener: Callable[..., Any]) -> int | None:
    """How many positional parameters `listener` names; None for *args or no signature."""
    try:
        params = inspect.signature(listener).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


class ListenerArguments:
    """The arguments each listener of one emitter gets (its signature read once)."""

    def __init__(self) -> None:
        self._declared: dict[int, tuple[Callable[..., Any], int | None]] = {}

    def fit(
        self, event: str, listener: Callable[..., Any], args: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        count = self._count(listener)
        if count is None:
            count = PACKAGE_ARGUMENTS.get(event, len(args))
        return args[:count]

    def _count(self, listener: Callable[..., Any]) -> int | None:
        known = self._declared.get(id(listener))
        if known is None or known[0] is not listener:
            known = self._declared[id(listener)] = (listener, _declared(listener))
        return known[1]
