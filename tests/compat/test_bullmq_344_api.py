"""What `bullmq` 3.4.4 (the newest on PyPI) has in its public API beyond 3.0.4, and the
layer has too: names, attributes and events (docs/porting.md, "Versions")."""

from __future__ import annotations

import croniter
import pytest

import psyq.compat.bullmq.custom_errors as custom_errors
from psyq.compat.bullmq import (
    DelayedError,
    Queue,
    QueueEvents,
    QueueEventsProducer,
    UnrecoverableError,
    WaitingChildrenError,
    Worker,
)
from psyq.compat.bullmq.job_scheduler import default_repeat_strategy
from psyq.core.worker import RENEW_LOCK
from psyq.errors import InvalidOptionsError, LockError

MEMORY = {"connection": "memory://"}


def test_custom_errors_is_where_bullmq_code_imports_them_from() -> None:
    assert custom_errors.UnrecoverableError is UnrecoverableError
    assert custom_errors.WaitingChildrenError is WaitingChildrenError
    assert custom_errors.DelayedError is DelayedError


def test_a_bad_cron_pattern_is_croniters_error_and_psyqs() -> None:
    with pytest.raises(croniter.CroniterBadCronError) as raised:
        default_repeat_strategy(0, {"pattern": "not-a-cron"})
    assert isinstance(raised.value, InvalidOptionsError) and "not-a-cron" in str(raised.value)


async def test_a_job_knows_its_backend_and_deduplication_id() -> None:
    queue = Queue("api-344", MEMORY)
    job = await queue.add("n", {}, {"deduplication": {"id": "d-1"}})
    assert job.backend is queue.backend and job.deduplication_id == "d-1"
    assert (await queue.add("m", {})).deduplication_id is None
    await queue.close()


async def test_events_classes_have_redis_handles_none_off_redis() -> None:
    events = QueueEvents("api-344", {**MEMORY, "autorun": False})
    producer = QueueEventsProducer("api-344", MEMORY)
    assert events.keys["events"] == "bull:api-344:events"
    assert events.client is None and events.redisConnection is None
    assert producer.client is None and producer.redisConnection is None
    await events.close()
    await producer.close()


async def test_a_lost_lock_is_lock_renewal_failed_too() -> None:
    worker = Worker("api-344", None, {**MEMORY, "autorun": False})
    seen: list[object] = []
    worker.on("lockRenewalFailed", seen.append)
    worker.on("error", lambda error: None)
    worker._core.emit("error", LockError("7", RENEW_LOCK, "the lock was lost"))
    assert seen == [["7"]]
    await worker.close()


async def test_a_scheduler_run_handed_over_without_a_fetch_adds_the_next_once(
    opts: dict[str, str], queue_name: str
) -> None:
    """`Worker.nextJobFromJobData` with a scheduler's run no worker fetched adds the next
    run, as bullmq's worker does; handed over again, it adds none."""
    if not opts["connection"].startswith(("redis", "postgres")):
        pytest.skip("this store adds a scheduler's next run when it hands out the run only")
    queue = Queue(queue_name, opts)
    worker = Worker(queue_name, None, opts)
    first = await queue.upsertJobScheduler("tick", {"every": 60_000}, job_name="tick")
    assert first is not None
    data = await worker.backend.getJobData(first.id)
    for _ in range(2):
        job = await worker.nextJobFromJobData(data, first.id, token="t")
        assert job is not None and job.id == first.id
        scheduler = await queue.getJobScheduler("tick")
        assert scheduler is not None and scheduler["iterationCount"] == 2
    await worker.close()
    await queue.close()
