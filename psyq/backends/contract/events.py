"""The contract's Events group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from typing import Any

from psyq.backends.contract.root import AdapterRoot

__all__ = ["Events"]


class Events(AdapterRoot):
    """The queue's event stream (what `QueueEvents` reads)."""

    #: True when the number after the "-" of an event id counts the queue's events one by
    #: one (the engine): a reader given a number not above its last one knows the
    #: store's event history started again (a restarted server) and says so
    event_ids_count: bool = False

    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """Events after last_id ("$" = only new ones) as (id, event, fields)."""
        raise self._unsupported("queue events")

    async def newest_event_id(self, queue: str) -> str:
        """The id of the queue's newest event ("0" when it has none): where a reader that
        wants only new events starts, so none added between two of its reads is missed."""
        raise self._unsupported("queue events")

    async def start_reading_events(self, queue: str) -> None:
        """A reader of the queue's events is about to fix its starting point: from when
        this returns, every event of the queue is written for it (Postgres, `when-read`:
        its lease, docs/backends.md); the other stores write every event always."""

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        raise self._unsupported("queue events")

    async def set_event_policy(self, queue: str, policy: str) -> None:
        """Store the queue's event policy (psyq.rules.event_policy, checked by the
        caller). Only Postgres writes fewer events under `when-read` (docs/backends.md);
        every other store writes each event always, and accepts either policy so."""
