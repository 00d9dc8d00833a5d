"""The bounds every store holds a number in, and the check that names a value outside them:
one rule for the options (core) and the schedules (rules/schedule.py) alike."""

from __future__ import annotations

from typing import Any

from psyq.errors import InvalidOptionsError

__all__ = ["MAX_COUNT", "MAX_DELAY_MS", "MAX_INT", "MAX_PRIORITY", "MAX_TIMESTAMP_MS", "check_int"]

MAX_PRIORITY = 2**21 - 1
MAX_DELAY_MS = 2**42  # delayed scores encode ms << 12 in 53 bits (BullMQ's layout)
# Every integer option fits what each store keeps (SQLite and Postgres: int64) and what a JS
# number holds exactly (Node BullMQ reads the same options): 2**53 - 1.
MAX_INT = 2**53 - 1
# A count (attempts, how many finished jobs or log rows to keep, a scheduler's runs) fits a
# 32-bit integer, what BullMQ 6's Postgres layout keeps it in (`integer` columns).
MAX_COUNT = 2**31 - 1
MAX_TIMESTAMP_MS = MAX_DELAY_MS  # ms since the epoch, up to the year 2109: not us or ns


def check_int(name: str, value: Any, *, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """Return `value` if it is an int within [minimum, maximum], else raise naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionsError(f"option {name!r} must be an integer, got {value!r}", option=name)
    if value < minimum and maximum == MAX_INT:
        raise InvalidOptionsError(
            f"option {name!r} must be >= {minimum}, got {value!r}", option=name
        )
    if value < minimum or value > maximum:
        why = " (the largest integer every store and Node BullMQ hold exactly)"
        raise InvalidOptionsError(
            f"option {name!r} must be between {minimum} and {maximum}"
            f"{why if maximum == MAX_INT else ''}, got {value!r}",
            option=name,
        )
    return value
