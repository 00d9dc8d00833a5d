"""`bullmq.custom_errors`: where `bullmq` code imports the errors a processor raises from."""

from psyq.compat.bullmq.errors import DelayedError, UnrecoverableError, WaitingChildrenError

__all__ = ["DelayedError", "UnrecoverableError", "WaitingChildrenError"]
