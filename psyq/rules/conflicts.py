"""Conflicts a store broke and psyq ran again: a Postgres deadlock or serialization
failure, retried at once by the backend (its statements are one transaction each).

Counted for the whole process, per store and cause (`counts()`; the Prometheus plugin
exposes them as `psyq_store_conflicts_total`), and logged once per burst: the first
conflict after a quiet spell is logged, those that follow within `QUIET_S` of the one
before are only counted, and the next log line says how many the burst before it had.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

__all__ = ["QUIET_S", "Conflicts", "conflicts"]

QUIET_S = 10.0  # seconds without a conflict that end a burst

log = logging.getLogger("psyq.conflicts")


class Conflicts:
    """Counts and the burst of conflicts of one process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._counts: Counter[tuple[str, str]] = Counter()
        self._last = -float("inf")
        self._burst = 0
        self._lock = threading.Lock()  # sync backends count from their own threads

    def record(self, store: str, cause: str, error: BaseException) -> None:
        """Count one conflict retried; log it when it opens a burst."""
        now = self._clock()
        with self._lock:
            self._counts[store, cause] += 1
            opens, before = now - self._last > QUIET_S, self._burst
            self._burst = 1 if opens else self._burst + 1
            self._last = now
        if opens:
            log.warning(
                "psyq: %s %s, retried at once (%s); more within %.0f s of each other are "
                "counted in psyq_store_conflicts_total, not logged%s",
                store,
                cause,
                str(error).splitlines()[0] if str(error) else type(error).__name__,
                QUIET_S,
                f" (the burst before counted {before})" if before > 1 else "",
            )

    def counts(self) -> dict[tuple[str, str], int]:
        """{(store, cause): conflicts retried} since the process started."""
        with self._lock:
            return dict(self._counts)


conflicts = Conflicts()  # the process's
