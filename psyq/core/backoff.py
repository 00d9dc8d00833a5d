"""Backoff between attempts: fixed, exponential (both with optional jitter) and custom
strategies registered by name.

A strategy returns the delay in ms before the next attempt; -1 (or None) means "do not retry",
0 means "retry at once".
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from psyq.errors import InvalidOptionsError

_RNG = random.Random()

__all__ = [
    "BackoffStrategy",
    "backoff_delay",
    "register_backoff_strategy",
    "registered_backoff_strategy",
]

# (attempts_made, backoff type, error, job) -> delay ms, or -1 / None for "no retry"
BackoffStrategy = Callable[[int, str, BaseException | None, Any], "int | None"]

_STRATEGIES: dict[str, BackoffStrategy] = {}


def register_backoff_strategy(name: str, strategy: BackoffStrategy) -> None:
    """Make `strategy` available to jobs whose backoff is `{"type": name, ...}`."""
    if name in ("fixed", "exponential"):
        raise InvalidOptionsError(f"backoff strategy name {name!r} is built in", option="backoff")
    _STRATEGIES[name] = strategy


def registered_backoff_strategy(name: str) -> BackoffStrategy | None:
    """The strategy `register_backoff_strategy` gave `name`, else None."""
    return _STRATEGIES.get(name)


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
