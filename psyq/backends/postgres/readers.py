"""A queue's event policy and its readers' leases (sql/readers.sql).

The policy is stored with the queue, in the layout's `meta` table (`psyq.events`), so every
process sees it: `always` (no row; what Node BullMQ expects) or `when-read`. Under
`when-read`, psyq's own add and settle-with-take statements (sql/fast.sql) write the
queue's event rows only while some reader holds a live lease in `psyq_event_reader`.

A backend that reads a queue's events (events.py) holds a lease on it from before its
reader's starting point is fixed ("$" resolved, or the first read) until it stops
reading, renewing it every third of READER_LEASE_S; a process that dies leaves its lease
to expire. Statements that began before the lease was committed may still skip their
rows: they came before the reader started.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from psyq.backends.postgres.connection import BullmqConnection
from psyq.errors import PsyqError
from psyq.rules.event_policy import check_event_policy

__all__ = ["READER_LEASE_S", "EventReaders"]

log = logging.getLogger("psyq.postgres")
READER_LEASE_S = 30.0  # how long a reader's lease outlives its last renewal


class EventReaders(BullmqConnection):
    """Stores event policies; holds this backend's readers' leases."""

    _policy_stored: set[str]
    _leases: set[str]
    _reader_id: str
    _lease_lock: asyncio.Lock
    _renewing: asyncio.Task[None] | None = None

    async def set_event_policy(self, queue: str, policy: str) -> None:
        """Store `policy` with `queue` (every process sees it from its next statement)."""
        await self._rows("readers.policy", queue, check_event_policy(policy))
        self._policies_stored().add(queue)

    async def _store_default_policy(self, queue: str) -> None:
        """The URL's `events=` policy, stored once per queue this backend adds to (a queue
        given its own by Queue(events=...) keeps it)."""
        wanted = self.settings.events
        if wanted is not None and queue not in self._policies_stored():
            await self.set_event_policy(queue, wanted)

    async def _hold_lease(self, queue: str) -> None:
        """Take this backend's lease on `queue`'s events (committed before returning)."""
        leases = self._held_leases()
        async with self._lease_changes():
            if queue in leases:
                return
            await self._rows("readers.hold", [queue], self._reader_name(), _lease_ms())
            leases.add(queue)
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.create_task(self._renew())

    async def _release_lease(self, queue: str) -> None:
        """End this backend's lease on `queue`, unless a read of it started meanwhile."""
        async with self._lease_changes():
            if queue in self._held_leases() and not self._reading(queue):
                self._held_leases().discard(queue)
                await self._rows("readers.release", queue, self._reader_name())

    def _reading(self, queue: str) -> bool:
        """Whether a read of `queue` is under way (events.py says)."""
        return False

    async def _renew(self) -> None:
        """Renew this backend's leases while it holds any; a failed renewal is logged and
        tried again at the next turn."""
        while self._held_leases():
            await asyncio.sleep(READER_LEASE_S / 3)
            try:
                async with self._lease_changes():
                    queues = sorted(self._held_leases())
                    await self._rows("readers.hold", queues, self._reader_name(), _lease_ms())
            except PsyqError as exc:
                log.warning("psyq: renewing the event readers' leases failed: %s", exc)

    async def close(self) -> None:
        task, self._renewing = self._renewing, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for queue in sorted(self._held_leases()):
            try:
                await self._rows("readers.release", queue, self._reader_name())
            except PsyqError as exc:  # the lease expires by itself
                log.warning("psyq: ending the event reader's lease of %r failed: %s", queue, exc)
        self._held_leases().clear()
        await super().close()

    def _lease_changes(self) -> asyncio.Lock:
        """Serialises taking, renewing and ending leases (an end sent after a new take
        would leave a reader without one)."""
        if not hasattr(self, "_lease_lock"):
            self._lease_lock = asyncio.Lock()
        return self._lease_lock

    def _policies_stored(self) -> set[str]:
        if not hasattr(self, "_policy_stored"):
            self._policy_stored = set()
        return self._policy_stored

    def _held_leases(self) -> set[str]:
        if not hasattr(self, "_leases"):
            self._leases = set()
        return self._leases

    def _reader_name(self) -> str:
        if not hasattr(self, "_reader_id"):
            self._reader_id = uuid.uuid4().hex
        return self._reader_id


def _lease_ms() -> int:
    return int(READER_LEASE_S * 1000)
