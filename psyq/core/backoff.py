"""Backoff between attempts: fixed, exponential (both with optional jitter) and custom
strategies registered by name.

A strategy returns the delay in ms before the next attempt; -1 (or None) means "do not retry",
0 means "retry at once".
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from psyq.errors import InvalidOptionsError

_RNG = random.Random()

__all__ = [
    "BackoffStrategy",
    "Reconnect",
    "backoff_delay",
    "register_backoff_strategy",
    "until_done",
]

T = TypeVar("T")

# (attempts_made, backoff type, error, job) -> delay ms, or -1 / None for "no retry"
BackoffStrategy = Callable[[int, str, BaseException | None, Any], "int | None"]

_STRATEGIES: dict[str, BackoffStrategy] = {}


def register_backoff_strategy(name: str, strategy: BackoffStrategy) -> None:
    """Make `strategy` available to jobs whose backoff is `{"type": name, ...}`."""
    if name in ("fixed", "exponential"):
        raise InvalidOptionsError(f"backoff strategy name {name!r} is built in", option="backoff")
    _STRATEGIES[name] = strategy


def _jittered(delay: float, jitter: float, rng: random.Random) -> int:
    if jitter <= 0:
        return round(delay)
    return round(delay * (1 - jitter) + rng.random() * delay * jitter)


def backoff_delay(
    backoff: int | Mapping[str, Any] | None,
    attempts_made: int,
    error: BaseException | None = None,
    job: Any = None,
    *,
    strategies: Mapping[str, BackoffStrategy] | None = None,
    rng: random.Random | None = None,
) -> int | None:
    """Delay in ms before the retry that follows `attempts_made` failed attempts.

    Returns None when the strategy says not to retry.
    """
    if backoff is None:
        return 0
    if isinstance(backoff, int):
        return backoff
    kind = str(backoff["type"])
    delay = int(backoff.get("delay", 0))
    jitter = float(backoff.get("jitter", 0))
    rng = rng or _RNG
    if kind == "fixed":
        return _jittered(delay, jitter, rng)
    if kind == "exponential":
        return _jittered(2 ** (attempts_made - 1) * delay, jitter, rng)
    strategy = (strategies or {}).get(kind) or _STRATEGIES.get(kind)
    if strategy is None:
        raise InvalidOptionsError(
            f"unknown backoff strategy {kind!r}; register it with "
            "psyq.register_backoff_strategy or Worker(backoff_strategies=...)",
            option="backoff",
        )
    result = strategy(attempts_made, kind, error, job)
    if result is None or result < 0:
        return None
    return int(result)


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
