"""psyq's core classes as this layer uses them: they accept the empty queue name that the
`bullmq` package allows (its keys are then `bull::wait`, ...)."""

from __future__ import annotations

from psyq.core.flow import FlowProducer
from psyq.core.queue import Queue
from psyq.core.queue_events import QueueEvents
from psyq.core.worker import Worker

__all__ = ["CoreFlowProducer", "CoreQueue", "CoreQueueEvents", "CoreWorker"]


class CoreQueue(Queue):
    allow_empty_name = True


class CoreWorker(Worker):
    allow_empty_name = True


class CoreQueueEvents(QueueEvents):
    allow_empty_name = True


class CoreFlowProducer(FlowProducer):
    allow_empty_name = True
