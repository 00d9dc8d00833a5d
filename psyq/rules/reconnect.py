"""Pacing the attempts to reach a store that stopped answering (`Reconnect`), and
bookkeeping retried until it lands (`until_done`): shared by every backend's connection
and by the worker."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["Reconnect", "until_done"]

T = TypeVar("T")
_RNG = random.Random()


class Reconnect:
    """Capped, jittered exponential backoff between attempts to reach a store that stopped
    answering: the n-th consecutive failure waits a random time in [d/2, d] with
    d = min(cap, first * 2**(n-1)) (50 ms, 100 ms, ... 2 s by default); a success resets it.

    Shared by every caller of one connection, so a restarting server sees one attempt per
    delay instead of one per waiting caller."""

    def __init__(
        self, first_s: float = 0.05, cap_s: float = 2.0, rng: random.Random | None = None
    ) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        self.failures = 0
        self._retry_at = 0.0
        self._rng = rng or _RNG

    def delay(self) -> float:
        """The delay after the current run of failures (0 when the last attempt worked)."""
        if self.failures == 0:
            return 0.0
        ceiling = min(self.cap_s, self.first_s * 2 ** min(self.failures - 1, 30))
        return float(ceiling / 2 + self._rng.random() * ceiling / 2)

    def failed(self) -> None:
        """Count a failure; failures of attempts made before the next retry was due (calls
        already in flight) do not lengthen the delay again."""
        now = time.monotonic()
        if now >= self._retry_at:
            self.failures += 1
            self._retry_at = now + self.delay()

    def succeeded(self) -> None:
        self.failures = 0

    async def wait(self) -> None:
        """Sleep until the next attempt is due (at once when nothing failed)."""
        if self.failures:
            left = self._retry_at - time.monotonic()
            if left > 0:
                await asyncio.sleep(left)


async def until_done(
    call: Callable[[], Awaitable[T]],
    retry_on: tuple[type[BaseException], ...],
    on_retry: Callable[[BaseException], object] | None = None,
    pace: Reconnect | None = None,
) -> T:
    """`call()` again, paced by `pace` (a `Reconnect` of its own by default), while it
    raises one of `retry_on` (a store that does not answer), until it returns: bookkeeping
    that must land (a scheduler's next run, a worker's registration) is never dropped.
    `on_retry(error)` hears each failure; the caller's cancellation ends the tries."""
    pace = pace or Reconnect()
    while True:
        try:
            return await call()
        except retry_on as exc:
            if on_retry is not None:
                on_retry(exc)
            pace.failed()
            await pace.wait()
