"""Transitions some backends offer beyond the BackendAdapter contract (base.py). A caller
uses one when `isinstance(adapter, <Protocol>)` says the adapter has it; without it, the
caller says what the store lacks (or, where that is the store's own way, does nothing).
Redis and Postgres have both; the engine and psyq:// have neither."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["PublishesEvents", "SchedulesNextRun"]


@runtime_checkable
class PublishesEvents(Protocol):
    async def publish_event(
        self, queue: str, event: str, fields: Mapping[str, Any], max_events: int
    ) -> None:
        """Add a custom event `event` with `fields` to the queue's events, keeping about
        `max_events` of them where the store trims by count (QueueEventsProducer)."""


@runtime_checkable
class SchedulesNextRun(Protocol):
    async def schedule_next_run(self, queue: str, scheduler_id: str, job_id: str) -> None:
        """Job `job_id`, a run of scheduler `scheduler_id`, is handed to a worker outside a
        fetch (bullmq's `Worker.nextJobFromJobData`): add the scheduler's next run as a
        fetch of it would; nothing when that run exists already (the job is no longer the
        scheduler's current run)."""
