"""QueueEvents: BullMQ's event names and fields, resuming, the bounded log."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import psyq
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state


def names(rec: Recorder, event: str) -> list[dict[str, Any]]:
    return [args[0] for args in rec.events[event]]


async def test_the_life_of_a_job_in_events(
    queue: psyq.Queue, queue_events: psyq.QueueEvents, make_worker: WorkerFactory
) -> None:
    rec = Recorder(queue_events, "added", "waiting", "active", "progress", "completed", "drained")

    async def process(job: psyq.Job) -> dict[str, int]:
        await job.update_progress({"half": 50})
        return {"ok": 1}

    job = await queue.add("send", {"x": 1})
    make_worker(process)
    await rec.wait("completed")
    assert names(rec, "added") == [{"jobId": job.id, "name": "send"}]
    assert names(rec, "waiting")[0]["jobId"] == job.id
    assert names(rec, "active")[0] == {"jobId": job.id, "prev": "waiting"}
    assert names(rec, "progress")[0] == {"jobId": job.id, "data": {"half": 50}}
    completed = names(rec, "completed")[0]
    assert completed == {"jobId": job.id, "returnvalue": {"ok": 1}, "prev": "active"}
    await rec.wait("drained")
    event_id = rec.events["completed"][0][1]
    assert isinstance(event_id, str) and event_id


async def test_failures_retries_and_delays(
    queue: psyq.Queue, queue_events: psyq.QueueEvents, make_worker: WorkerFactory
) -> None:
    rec = Recorder(queue_events, "failed", "retries-exhausted", "delayed", "waiting")

    def process(job: psyq.Job) -> None:
        raise ValueError("nope")

    job = await queue.add("x", attempts=2, backoff={"type": "fixed", "delay": 10})
    make_worker(process)
    await rec.wait("retries-exhausted")
    assert names(rec, "failed") == [{"jobId": job.id, "failedReason": "nope", "prev": "active"}]
    assert names(rec, "retries-exhausted") == [{"jobId": job.id, "attemptsMade": 2}]
    assert names(rec, "delayed")[0]["jobId"] == job.id
    assert any(args.get("prev") == "delayed" for args in names(rec, "waiting"))


async def test_admin_events(queue: psyq.Queue, queue_events: psyq.QueueEvents) -> None:
    rec = Recorder(queue_events, "paused", "resumed", "removed", "cleaned", "duplicated")
    job = await queue.add("x", job_id="fixed")
    await queue.add("x", job_id="fixed")
    await queue.pause()
    await queue.resume()
    await queue.remove(job.id)
    await queue.clean(0, 0, "completed")
    await rec.wait("cleaned")
    assert names(rec, "duplicated") == [{"jobId": "fixed"}]
    assert len(rec.events["paused"]) == 1 and len(rec.events["resumed"]) == 1
    assert names(rec, "removed") == [{"jobId": "fixed", "prev": "waiting"}]
    assert names(rec, "cleaned") == [{"count": "0"}]


async def test_resume_from_a_seen_event_id(queue: psyq.Queue, backend_url: str) -> None:
    first = psyq.QueueEvents(queue.name, connection=backend_url, last_event_id="0")
    rec = Recorder(first, "added")
    await queue.add("a")
    await rec.wait("added")
    resume_from = rec.events["added"][0][1]
    await first.close()
    await queue.add("b")
    later = psyq.QueueEvents(queue.name, connection=backend_url, last_event_id=resume_from)
    try:
        rec2 = Recorder(later, "added")
        await rec2.wait("added")
        await queue.add("c")  # a mark: whatever came before it has been read once it arrives
        await rec2.wait("added", 2)
        assert [args[0]["name"] for args in rec2.events["added"]] == ["b", "c"]
    finally:
        await later.close()


async def test_only_new_events_by_default(queue: psyq.Queue, backend_url: str) -> None:
    await queue.add("old")
    events = psyq.QueueEvents(queue.name, connection=backend_url)
    try:
        rec = Recorder(events, "added")
        await events.wait_until_ready(5)
        await queue.add("new")
        await rec.wait("added")
        assert [args[0]["name"] for args in rec.events["added"]] == ["new"]
    finally:
        await events.close()


async def test_reading_after_the_newest_event_id(queue: psyq.Queue) -> None:
    """Where a "$" reader starts: exactly the events added after it, even when no read was
    waiting while they were added (a "$" read would start after them)."""
    backend = await queue._open()
    assert await backend.newest_event_id(queue.name) == "0"
    await queue.add("old")
    start = await backend.newest_event_id(queue.name)
    assert start != "0"
    assert await backend.read_events(queue.name, start, 10, 0) == []
    await queue.add("new")
    found = await backend.read_events(queue.name, start, 10, 0)
    assert [(event, fields["jobId"]) for _id, event, fields in found] == [
        ("added", "2"),
        ("waiting", "2"),
    ]
    newest = await backend.newest_event_id(queue.name)
    assert await backend.read_events(queue.name, newest, 10, 0) == []


async def test_wait_until_ready_returns_after_close(backend_url: str, queue_name: str) -> None:
    events = psyq.QueueEvents(queue_name, connection=backend_url, autorun=False)
    await events.close()
    await events.wait_until_ready(1)


async def test_async_iteration(queue: psyq.Queue, queue_events: psyq.QueueEvents) -> None:
    await queue.add("a")
    seen = []
    async for event, args, _event_id in queue_events:
        seen.append((event, args["jobId"]))
        if event == "waiting":
            break
    assert seen == [("added", "1"), ("waiting", "1")]


async def test_wait_until_finished(
    queue: psyq.Queue, queue_events: psyq.QueueEvents, make_worker: WorkerFactory
) -> None:
    async def process(job: psyq.Job) -> Any:
        if job.name == "bad":
            raise RuntimeError("it broke")
        await asyncio.sleep(0.05)  # sleep: the job's work
        return {"n": job.data}

    good = await queue.add("good", 7)
    bad = await queue.add("bad")
    make_worker(process, concurrency=2)
    assert await good.wait_until_finished(queue_events, timeout=5) == {"n": 7}
    with pytest.raises(psyq.JobFailedError, match="it broke"):
        await bad.wait_until_finished(queue_events, timeout=5)
    assert await good.wait_until_finished(queue_events, timeout=5) == {"n": 7}  # already done


async def test_wait_until_finished_times_out(
    queue: psyq.Queue, queue_events: psyq.QueueEvents
) -> None:
    job = await queue.add("never")
    with pytest.raises(TimeoutError):
        await job.wait_until_finished(queue_events, timeout=0.1)


# How many events past max_len_events a store may hold: BullMQ 6's Postgres layout trims the
# table in chunks (when the schema's event sequence reaches a multiple of 256), as Redis's
# `XTRIM MAXLEN ~` does; psyq's other stores trim exactly.
TRIM_SLACK = {"postgresql": 255, "postgres": 255}


async def test_the_event_log_is_bounded(queue: psyq.Queue, backend_url: str) -> None:
    slack = TRIM_SLACK.get(backend_url.split(":", 1)[0], 0)
    jobs = 300  # 600 events: past max_len + slack, so a chunked trim has run too
    await queue.set_max_len_events(20)
    await queue.add_bulk([{"name": "x"} for _ in range(jobs)])
    events = psyq.QueueEvents(queue.name, connection=backend_url, last_event_id="0")
    try:
        rec = Recorder(events, "added", "waiting")
        last = str(jobs)
        await eventually(lambda: any(data["jobId"] == last for data, _ in rec.events["waiting"]))
        await asyncio.sleep(0.05)  # sleep: nothing arrives past the last event
        kept = len(rec.events["added"]) + len(rec.events["waiting"])
        assert 20 <= kept <= 20 + slack
        assert rec.events["waiting"][-1][0]["jobId"] == last
    finally:
        await events.close()


async def test_bad_event_id_is_refused(queue: psyq.Queue, backend_url: str) -> None:
    events = psyq.QueueEvents(queue.name, connection=backend_url, last_event_id="x-y")
    try:
        rec = Recorder(events, "error")
        await rec.wait("error")
        assert "x-y" in str(rec.events["error"][0][0])
    finally:
        await events.close()


async def test_stalled_event(
    queue: psyq.Queue, queue_events: psyq.QueueEvents, make_worker: WorkerFactory
) -> None:
    rec = Recorder(queue_events, "stalled")
    job = await queue.add("x")
    worker = make_worker(autorun=False, lock_duration=20)
    taken = await worker.get_next_job("tok")
    assert taken is not None and taken.id == job.id
    await asyncio.sleep(0.05)  # sleep: the 20 ms lock expires
    await worker.check_stalled()
    await wait_state(queue, job.id, "waiting")
    await rec.wait("stalled")
    assert rec.events["stalled"][0][0] == {"jobId": job.id}
