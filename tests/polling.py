"""One way for tests to wait for something: poll a condition until it holds or a deadline
passes, then fail saying what was awaited and what was last seen. A test never sleeps "long
enough" for something to happen (CONTRIBUTING.md, "Tests"); it waits for the condition.

`eventually` (async; the condition may be sync or async) and `eventually_sync` (for threads
and plain tests) return the condition's first truthy value. Helpers that wait on something
else (a line of a process's output, a file) keep their own reads but take the same
`Deadline`, so every wait fails the same way."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NoReturn, TypeVar, overload

T = TypeVar("T")

TIMEOUT = 10.0  # seconds; a test that waits longer names its own
INTERVAL = 0.01  # seconds between two polls


class Deadline:
    """`timeout` seconds from now for awaiting `what`: `passed()` says whether they are
    over, `fail()` raises the one failure every wait raises."""

    def __init__(self, what: str, timeout: float = TIMEOUT) -> None:
        self.what, self.timeout = what, timeout
        self.at = time.monotonic() + timeout

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() > self.at

    def fail(self, seen: object = None) -> NoReturn:
        last = "" if seen is None else f" (last seen: {seen!r})"
        raise AssertionError(f"not within {self.timeout:g} s: {self.what}{last}")


@overload
async def eventually(
    condition: Callable[[], Awaitable[T]],
    what: str | None = None,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> T: ...


@overload
async def eventually(
    condition: Callable[[], T],
    what: str | None = None,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> T: ...


async def eventually(
    condition: Callable[[], object],
    what: str | None = None,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> object:
    """Poll `condition` (sync or async) until it returns something truthy; return that.
    Fails with `what` (else where the condition is written) once `timeout` seconds pass."""
    deadline = Deadline(what or described(condition), timeout)
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if deadline.passed():
            deadline.fail(value)
        await asyncio.sleep(interval)


def eventually_sync(
    condition: Callable[[], T],
    what: str | None = None,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> T:
    """`eventually` for code without a running loop (threads, subprocess tests)."""
    deadline = Deadline(what or described(condition), timeout)
    while True:
        value = condition()
        if value:
            return value
        if deadline.passed():
            deadline.fail(value)
        time.sleep(interval)


def described(condition: Callable[..., object]) -> str:
    """Where a condition without a description is written: its name, file and line."""
    code = getattr(condition, "__code__", None)
    name = getattr(condition, "__qualname__", repr(condition))
    if code is None:
        return name
    return f"{name} ({Path(code.co_filename).name}:{code.co_firstlineno})"
