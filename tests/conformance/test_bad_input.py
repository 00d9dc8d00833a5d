"""Bad input: the same psyq error on every backend, before anything is written (the gate,
psyq/core/gate.py), and values a processor makes that cannot be stored fail its job."""

from __future__ import annotations

from typing import Any

import pytest

import psyq

from .conftest import WorkerFactory, wait_state


@pytest.fixture
def backend_url(any_backend_url: str) -> str:
    """Every backend, and psyq:// over a server's in-memory engine too."""
    return any_backend_url


LONE = "bad\ud800text"  # what errors="surrogateescape" or os.listdir can produce
ALL_STATES = ("waiting", "active", "completed", "failed", "delayed", "prioritized", "paused")


async def total(queue: psyq.Queue) -> int:
    return sum((await queue.get_job_counts(*ALL_STATES, "waiting-children")).values())


BAD_ADDS: dict[str, tuple[tuple[Any, ...], dict[str, Any], type[Exception], str]] = {
    "data value": (("x", {"v": LONE}), {}, psyq.InvalidDataError, r"data of job 'x'"),
    "data key": (("x", {LONE: 1}), {}, psyq.InvalidDataError, r"lone surrogate"),
    "nested data": (("x", [1, {"a": [LONE]}]), {}, psyq.InvalidDataError, r"lone surrogate"),
    "name": ((LONE, {}), {}, psyq.InvalidDataError, r"job name 'bad\\ud800text'"),
    "NUL in a data string": (("x", {"v": "a\x00b"}), {}, psyq.InvalidDataError, r"NUL"),
    "NUL in a data key": (("x", [{"k\x00": 1}]), {}, psyq.InvalidDataError, r"NUL"),
    "attempts 2**31": (("x", {}), {"attempts": 2**31}, psyq.InvalidOptionsError, "2147483647"),
    "jobId": (("x", {}), {"jobId": LONE}, psyq.InvalidOptionsError, r"job 'x': option 'jobId'"),
    "dedup id": (
        ("x", {}),
        {"deduplication": {"id": LONE}},
        psyq.InvalidOptionsError,
        r"'deduplication.id'",
    ),
    "backoff type": (
        ("x", {}),
        {"attempts": 2, "backoff": {"type": LONE}},
        psyq.InvalidOptionsError,
        r"'backoff.type'",
    ),
    "timestamp in ns": (
        ("x", {}),
        {"timestamp": 1_764_000_000_000_000_000},
        psyq.InvalidOptionsError,
        r"'timestamp' must be between 0 and",
    ),
    "timestamp 2**70": (("x", {}), {"timestamp": 2**70}, psyq.InvalidOptionsError, "timestamp"),
    "attempts 2**70": (("x", {}), {"attempts": 2**70}, psyq.InvalidOptionsError, "'attempts'"),
    "keepLogs 2**63": (("x", {}), {"keepLogs": 2**63}, psyq.InvalidOptionsError, "'keepLogs'"),
    "removeOnComplete 2**64": (
        ("x", {}),
        {"removeOnComplete": {"count": 2**64}},
        psyq.InvalidOptionsError,
        "removeOnComplete.count",
    ),
    "delay 2**70": (("x", {}), {"delay": 2**70}, psyq.InvalidOptionsError, "'delay'"),
    "priority 2**70": (("x", {}), {"priority": 2**70}, psyq.InvalidOptionsError, "'priority'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ADDS))
async def test_a_bad_add_is_refused_naming_the_field_and_nothing_is_written(
    queue: psyq.Queue, case: str
) -> None:
    args, opts, error, message = BAD_ADDS[case]
    await queue.add("good", {"n": 1})
    with pytest.raises(error, match=message):
        await queue.add(*args, **opts)
    assert await total(queue) == 1
    job = await queue.add("good", {"n": 2})  # the backend keeps working
    assert job.data == {"n": 2}
    assert await total(queue) == 2


async def test_a_bulk_add_with_one_bad_job_writes_none(queue: psyq.Queue) -> None:
    entries: list[dict[str, Any]] = [{"name": "ok", "data": i} for i in range(5)]
    entries.insert(3, {"name": "bad", "data": {"v": LONE}})
    with pytest.raises(psyq.InvalidDataError, match="data of job 'bad'"):
        await queue.add_bulk(entries)
    entries[3] = {"name": "bad", "data": None, "opts": {"timestamp": 2**70}}
    with pytest.raises(psyq.InvalidOptionsError, match="job 'bad'"):
        await queue.add_bulk(entries)
    assert await total(queue) == 0


async def test_a_flow_with_one_bad_node_writes_none(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer
) -> None:
    child = {"name": "c2", "queue_name": queue.name, "data": {"v": LONE}}
    flow = {
        "name": "parent",
        "queue_name": queue.name,
        "children": [{"name": "c1", "queue_name": queue.name}, child],
    }
    with pytest.raises(psyq.InvalidDataError, match="data of job 'c2'"):
        await flow_producer.add(flow)
    assert await total(queue) == 0


async def test_updates_of_a_job_are_gated(queue: psyq.Queue) -> None:
    job = await queue.add("x", {"n": 1})
    with pytest.raises(psyq.InvalidDataError, match="data of job"):
        await job.update_data({"n": LONE})
    with pytest.raises(psyq.InvalidDataError, match="progress of job"):
        await job.update_progress({"p": LONE})
    with pytest.raises(psyq.InvalidDataError, match="log row of job"):
        await job.log(LONE)
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert (stored.data, stored.progress) == ({"n": 1}, 0)
    assert (await queue.get_job_logs(job.id))["count"] == 0


async def test_a_bad_scheduler_is_refused_and_none_is_made(queue: psyq.Queue) -> None:
    with pytest.raises(psyq.InvalidDataError, match="data of job 'tick'"):
        await queue.upsert_job_scheduler("s", {"every": 60_000}, {"name": "tick", "data": LONE})
    with pytest.raises(psyq.InvalidOptionsError, match="scheduler id"):
        await queue.upsert_job_scheduler(LONE, {"every": 60_000})
    with pytest.raises(psyq.InvalidOptionsError, match="'every'"):
        await queue.upsert_job_scheduler("s", {"every": 2**70})
    assert await queue.get_job_schedulers() == []
    assert await total(queue) == 0


async def test_a_return_value_that_cannot_be_stored_fails_its_job_at_once(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    bad = await queue.add("bad", {}, attempts=3)
    good = await queue.add("good", {})

    async def process(job: psyq.Job) -> Any:
        return {"v": LONE} if job.name == "bad" else "fine"

    make_worker(process)
    await wait_state(queue, bad.id, "failed")
    await wait_state(queue, good.id, "completed")
    failed = await queue.get_job(bad.id)
    assert failed is not None and failed.failed_reason is not None
    assert failed.failed_reason.startswith("return value of job")
    assert "lone surrogate" in failed.failed_reason
    assert failed.attempts_made == 1  # not retried: the processor's work was done


async def test_an_error_message_with_a_lone_surrogate_is_stored_escaped(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("x", {})

    async def process(job: psyq.Job) -> None:
        raise ValueError(f"cannot open {LONE}")

    make_worker(process)
    await wait_state(queue, job.id, "failed")
    failed = await queue.get_job(job.id)
    assert failed is not None
    assert failed.failed_reason == "cannot open bad\\ud800text"
    assert "bad\\ud800text" in failed.stacktrace[-1]
