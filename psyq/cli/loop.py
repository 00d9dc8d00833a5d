"""The event loop of the long-running commands (`psyq server`, `psyq worker`): uvloop when it
is installed (`pip install 'psyq[speed]'`), else asyncio's own. PSYQ_LOOP=asyncio picks
asyncio's loop even with uvloop installed; PSYQ_LOOP=uvloop requires uvloop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from psyq.cli.common import CliError

__all__ = ["loop_factory", "run"]

T = TypeVar("T")


def loop_factory() -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The loop's name and a factory for it (None: asyncio's default)."""
    choice = os.environ.get("PSYQ_LOOP", "auto").strip().lower() or "auto"
    if choice not in ("auto", "uvloop", "asyncio"):
        raise CliError(f"PSYQ_LOOP must be auto, uvloop or asyncio, got {choice!r}")
    if choice == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise CliError("PSYQ_LOOP=uvloop needs uvloop: pip install 'psyq[speed]'") from None
        return "asyncio", None
    return "uvloop", uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on the loop `loop_factory` picks."""
    try:
        _, factory = loop_factory()
    except BaseException:
        main.close()  # never started: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
