"""The errors a `bullmq` processor raises to steer its job: psyq's own classes, so the core
worker acts on them (fail now, moved to delayed, waiting for children, rate limited); and
`BadCronError`, what a cron pattern that does not parse raises here."""

from __future__ import annotations

from psyq.errors import (
    DelayedError,
    InvalidOptionsError,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)

__all__ = [
    "BadCronError",
    "DelayedError",
    "RateLimitError",
    "UnrecoverableError",
    "WaitingChildrenError",
]


def _croniter_error() -> type[ValueError]:
    """croniter's `CroniterBadCronError`, which `bullmq` (parsing cron with croniter)
    raises, when croniter is installed (it comes with `bullmq`); else ValueError."""
    try:
        from croniter import CroniterBadCronError  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return ValueError
    return CroniterBadCronError  # type: ignore[no-any-return,unused-ignore]


class BadCronError(InvalidOptionsError, _croniter_error()):  # type: ignore[misc]
    """A cron pattern that does not parse (psyq parses cron with cronsim): psyq's
    InvalidOptionsError, and croniter's CroniterBadCronError too, so code written for
    `bullmq` catches it as it did."""
