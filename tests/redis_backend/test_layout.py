"""What psyq stores is BullMQ's layout: keys, hash fields, score encodings, marker, locks,
events, pause. (Interop with Node BullMQ itself is in tests/interop/.)"""

from __future__ import annotations

import json
from typing import Any

import psyq
from tests.polling import eventually

PRIORITY_SPAN = 2**32
DELAY_SPAN = 0x1000


async def test_a_plain_job_hash_and_wait_list(queue: psyq.Queue, raw: Any) -> None:
    job = await queue.add("send", {"to": "a"}, attempts=3, keep_logs=5)
    key = f"bull:{queue.name}"
    stored = await raw.hgetall(f"{key}:{job.id}")
    assert stored["name"] == "send" and json.loads(stored["data"]) == {"to": "a"}
    assert json.loads(stored["opts"]) == {"attempts": 3, "kl": 5}  # BullMQ's compressed keys
    assert stored["delay"] == "0" and stored["priority"] == "0"
    assert int(stored["timestamp"]) == job.timestamp
    assert await raw.lrange(f"{key}:wait", 0, -1) == [job.id]
    assert await raw.get(f"{key}:id") == job.id
    assert await raw.zrange(f"{key}:marker", 0, -1, withscores=True) == [("0", 0.0)]


async def test_drain_leaves_the_keys_bullmq_leaves(queue: psyq.Queue, raw: Any) -> None:
    """An add stores the events' bound in the meta hash (BullMQ's default, 10000) and a
    drain keeps the priority counter: after both, the queue's keys are BullMQ's five."""
    await queue.add("p", priority=3)
    await queue.add("w")
    key = f"bull:{queue.name}"
    assert await raw.hget(f"{key}:meta", "opts.maxLenEvents") == "10000"
    await queue.drain()
    left = {name.rpartition(":")[2] for name in await raw.keys(f"{key}:*")}
    assert left == {"marker", "events", "meta", "pc", "id"}


async def test_telemetry_is_stored_as_bullmq_stores_it(queue: psyq.Queue, raw: Any) -> None:
    telemetry = {"metadata": '{"traceparent":"00-ab-cd-01"}', "omitContext": False}
    job = await queue.add("send", {}, telemetry=telemetry)
    stored = json.loads(await raw.hget(f"bull:{queue.name}:{job.id}", "opts"))
    assert stored == {"tm": telemetry["metadata"], "omc": False}
    read = await queue.get_job(job.id)
    assert read is not None and read.opts["telemetry"] == telemetry


async def test_priority_and_delay_scores(queue: psyq.Queue, raw: Any) -> None:
    key = f"bull:{queue.name}"
    first = await queue.add("p", priority=7)
    second = await queue.add("p", priority=7)
    later = await queue.add("d", delay=60_000)
    scores = dict(await raw.zrange(f"{key}:prioritized", 0, -1, withscores=True))
    assert scores[first.id] == 7 * PRIORITY_SPAN + 1
    assert scores[second.id] == 7 * PRIORITY_SPAN + 2
    assert await raw.get(f"{key}:pc") == "2"
    [(job_id, score)] = await raw.zrange(f"{key}:delayed", 0, -1, withscores=True)
    assert job_id == later.id
    assert int(score) // DELAY_SPAN == later.timestamp + 60_000
    marker = dict(await raw.zrange(f"{key}:marker", 0, -1, withscores=True))
    assert marker["1"] == later.timestamp + 60_000  # the delay marker: when the next is due


async def test_fetch_sets_lock_and_counters_then_finish_fills_the_hash(
    queue: psyq.Queue, raw: Any, url: str
) -> None:
    job = await queue.add("a", {"n": 1})
    worker = psyq.Worker(queue.name, connection=url, autorun=False)
    try:
        taken = await worker.get_next_job("token-1", block=False)
        assert taken is not None and taken.id == job.id
        key = f"bull:{queue.name}"
        assert await raw.get(f"{key}:{job.id}:lock") == "token-1"
        assert 0 < await raw.pttl(f"{key}:{job.id}:lock") <= 30_000
        assert await raw.lrange(f"{key}:active", 0, -1) == [job.id]
        assert await raw.hget(f"{key}:{job.id}", "ats") == "1"
        await taken.move_to_completed({"ok": True}, "token-1", fetch_next=False)
        stored = await raw.hgetall(f"{key}:{job.id}")
        assert json.loads(stored["returnvalue"]) == {"ok": True}
        assert stored["atm"] == "1" and int(stored["finishedOn"]) >= int(stored["processedOn"])
        assert await raw.zscore(f"{key}:completed", job.id) == int(stored["finishedOn"])
        assert not await raw.exists(f"{key}:{job.id}:lock")
        assert await raw.hget(f"{key}:metrics:completed", "count") == "1"
    finally:
        await worker.close()


async def test_events_stream_fields(queue: psyq.Queue, raw: Any) -> None:
    job = await queue.add("a", delay=5000)
    entries = await raw.xrange(f"bull:{queue.name}:events")
    events = [(fields.pop("event"), fields) for _, fields in entries]
    assert events[0] == ("added", {"jobId": job.id, "name": "a"})
    assert events[1] == ("delayed", {"jobId": job.id, "delay": str(job.timestamp + 5000)})


async def test_pause_renames_wait_to_paused_and_sets_meta(queue: psyq.Queue, raw: Any) -> None:
    job = await queue.add("a")
    key = f"bull:{queue.name}"
    await queue.pause()
    assert await raw.hget(f"{key}:meta", "paused") == "1"
    assert await raw.lrange(f"{key}:paused", 0, -1) == [job.id]
    assert not await raw.exists(f"{key}:wait") and not await raw.exists(f"{key}:marker")
    await queue.resume()
    assert not await raw.hexists(f"{key}:meta", "paused")
    assert await raw.lrange(f"{key}:wait", 0, -1) == [job.id]


async def test_scripts_are_reloaded_after_a_script_flush(queue: psyq.Queue, raw: Any) -> None:
    await queue.add("before")
    await raw.script_flush()
    job = await queue.add("after")
    assert await queue.get_job_state(job.id) == "waiting"


async def test_a_prefix_in_the_url(url: str, queue_name: str, raw: Any) -> None:
    async with psyq.Queue(queue_name, connection=url, prefix="myapp") as queue:
        job = await queue.add("a")
    assert await raw.hget(f"myapp:{queue_name}:{job.id}", "name") == "a"


async def test_waiting_workers_are_named_as_bullmq_names_them(
    queue: psyq.Queue, raw: Any, url: str
) -> None:
    import base64

    worker = psyq.Worker(queue.name, lambda job: None, connection=url)
    expected = f"bull:{base64.b64encode(queue.name.encode()).decode()}:w:psyq"  # a named worker

    async def named() -> bool:
        return expected in [client.get("name") for client in await raw.client_list()]

    try:
        await eventually(named, f"a connection named {expected}")
        assert await raw.hget(f"bull:{queue.name}:meta", "version") == f"psyq:{psyq.__version__}"
    finally:
        await worker.close()


async def test_obliterate_in_batches_leaves_no_key(queue: psyq.Queue, raw: Any) -> None:
    await queue.add_bulk([{"name": "j", "data": i} for i in range(2100)])
    await queue.add("later", delay=60_000)
    await queue.add("urgent", priority=2)
    await queue.upsert_job_scheduler("tick", {"every": 60_000})
    job = await queue.add("logged")
    await job.log("row")
    await queue.obliterate()
    left = [key async for key in raw.scan_iter(match=f"bull:{queue.name}:*")]
    assert left == []


async def test_a_bulk_of_plain_and_other_jobs_is_stored_in_order(
    queue: psyq.Queue, raw: Any
) -> None:
    """addJobs writes a plain job's list push and the events' trim once per call: the
    stored hashes, wait list, ids and events are those of the jobs added one by one."""
    jobs = await queue.add_bulk(
        [
            {"name": "a", "data": 1},
            {"name": "b", "data": 2, "opts": {"jobId": "own"}},
            {"name": "c", "data": 3, "opts": {"lifo": True}},
            {"name": "d", "data": 4, "opts": {"priority": 2}},
            {"name": "e", "data": 5, "opts": {"attempts": 2}},
            {"name": "f", "data": 6},
        ]
    )
    assert [job.id for job in jobs] == ["1", "own", "2", "3", "4", "5"]
    key = f"bull:{queue.name}"
    # taken from the right: the lifo job first, then the others in the order added
    assert await raw.lrange(f"{key}:wait", 0, -1) == ["5", "4", "own", "1", "2"]
    assert await raw.zrange(f"{key}:prioritized", 0, -1) == ["3"]
    stored = await raw.hgetall(f"{key}:5")
    assert stored == {
        "name": "f",
        "data": "6",
        "opts": "{}",
        "timestamp": str(jobs[-1].timestamp),
        "delay": "0",
        "priority": "0",
    }
    assert json.loads((await raw.hgetall(f"{key}:4"))["opts"]) == {"attempts": 2}
    entries = await raw.xrange(f"{key}:events")
    events = [(fields["event"], fields["jobId"]) for _, fields in entries]
    assert events == [(event, job.id) for job in jobs for event in ("added", "waiting")]
    assert await raw.get(f"{key}:id") == "5"


async def test_a_bulk_keeps_a_small_events_bound_exactly(queue: psyq.Queue, raw: Any) -> None:
    key = f"bull:{queue.name}"
    await raw.hset(f"{key}:meta", "opts.maxLenEvents", 50)
    await queue.add_bulk([{"name": "j", "data": i} for i in range(300)])
    assert await raw.xlen(f"{key}:events") == 50
    last = await raw.xrevrange(f"{key}:events", count=1)
    assert last[0][1] == {"event": "waiting", "jobId": "300"}
