"""The errors a `bullmq` processor raises to steer its job: psyq's own classes, so the core
worker acts on them (fail now, moved to delayed, waiting for children, rate limited)."""

from __future__ import annotations

from psyq.errors import DelayedError, RateLimitError, UnrecoverableError, WaitingChildrenError

__all__ = ["DelayedError", "RateLimitError", "UnrecoverableError", "WaitingChildrenError"]
