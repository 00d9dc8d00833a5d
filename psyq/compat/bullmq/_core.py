"""psyq's core classes as this layer uses them: they accept the empty queue name that the
`bullmq` package allows (its keys are then `bull::wait`, ...)."""

from __future__ import annotations

from typing import Any

from psyq.core.flow import FlowProducer
from psyq.core.queue import Queue
from psyq.core.queue_events import QueueEvents
from psyq.core.worker import Worker

__all__ = ["CoreFlowProducer", "CoreQueue", "CoreQueueEvents", "CoreWorker"]


class CoreQueue(Queue):
    allow_empty_name = True


class CoreWorker(Worker):
    """A core Worker that also emits `locksRenewed({"count", "jobIds"})` after each lock
    renewal that renewed one or more locks, as Node BullMQ's lock manager does."""

    allow_empty_name = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Node's worker starts not drained: its first fetch that finds nothing emits drained
        self._takes.drained = False

    async def extend_locks(self) -> list[str]:
        held = list(self._active)
        lost = await super().extend_locks()
        renewed = [job_id for job_id in held if job_id not in lost]
        if renewed:
            self.emit("locksRenewed", {"count": len(renewed), "jobIds": renewed})
        return lost


class CoreQueueEvents(QueueEvents):
    allow_empty_name = True


class CoreFlowProducer(FlowProducer):
    allow_empty_name = True
