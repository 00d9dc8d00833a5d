"""`bullmq` (PyPI, 3.x) as a drop-in layer over psyq.

Change `from bullmq import Queue, Worker` to `from psyq.compat.bullmq import Queue, Worker`
and the program runs on psyq's core: on Redis next to Node BullMQ, or, by changing only its
`connection` (or `PSYQ_URL`), on `sqlite:///`, `psyq://`, `postgresql://` or `memory://`.
See docs/porting.md for what differs.
"""

from psyq.compat.bullmq.abort_controller import AbortController, AbortError, AbortSignal
from psyq.compat.bullmq.errors import (
    DelayedError,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from psyq.compat.bullmq.flow_producer import FlowProducer
from psyq.compat.bullmq.job import Job
from psyq.compat.bullmq.job_scheduler import JobScheduler
from psyq.compat.bullmq.queue import Queue
from psyq.compat.bullmq.queue_events import QueueEvents
from psyq.compat.bullmq.queue_events_producer import QueueEventsProducer
from psyq.compat.bullmq.worker import Worker

__version__ = "3.4.4"

__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "DelayedError",
    "FlowProducer",
    "Job",
    "JobScheduler",
    "Queue",
    "QueueEvents",
    "QueueEventsProducer",
    "RateLimitError",
    "UnrecoverableError",
    "WaitingChildrenError",
    "Worker",
]
