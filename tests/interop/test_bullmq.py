"""Node BullMQ and psyq on the same Redis queues: jobs added by one are processed by the other,
with the same results and states seen from both sides (the layout is the contract)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import psyq
from tests.conftest import fresh_name

# A W3C trace context as BullMQ's telemetry integrations store it (`telemetry.metadata`).
TRACE = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'

pytestmark = pytest.mark.timeout(300)


async def process(job: psyq.Job) -> dict[str, Any]:
    if job.data.get("fail"):
        raise ValueError("psyq says no")
    return {"doubled": job.data["n"] * 2, "name": job.name}


async def run_psyq_worker(queue_name: str, url: str, finished: int) -> None:
    """Process until `finished` jobs completed or failed for good."""
    done: list[str] = []
    all_done = asyncio.Event()

    def finish(job: psyq.Job) -> None:
        done.append(job.id)
        if len(done) >= finished:
            all_done.set()

    def failed(job: psyq.Job, error: BaseException) -> None:
        if job.attempts_made >= job.opts.get("attempts", 1):
            finish(job)

    worker = psyq.Worker(queue_name, process, connection=url)
    worker.on("completed", lambda job, result: finish(job))
    worker.on("failed", failed)
    try:
        await asyncio.wait_for(all_done.wait(), 20)
    finally:
        await worker.close()


async def test_node_adds_psyq_processes(node: Any, interop_redis_url: str) -> None:
    name = fresh_name("interop")
    jobs = [
        {"name": "plain", "data": {"n": 21}},
        {"name": "prioritized", "data": {"n": 1}, "opts": {"priority": 3}},
        {"name": "delayed", "data": {"n": 2}, "opts": {"delay": 100}},
        {
            "name": "custom",
            "data": {"n": 3},
            "opts": {"jobId": "my-id", "attempts": 2, "telemetry": {"metadata": TRACE}},
        },
        {"name": "bad", "data": {"n": 0, "fail": True}, "opts": {"attempts": 2, "backoff": 10}},
    ]
    ids = node("add.js", name, interop_redis_url, json.dumps(jobs))
    assert ids[:4] == ["1", "2", "3", "my-id"]  # BullMQ counts custom ids too: the last is "5"
    await run_psyq_worker(name, interop_redis_url, len(jobs))
    async with psyq.Queue(name, connection=interop_redis_url) as queue:
        custom = await queue.get_job("my-id")
        assert custom is not None and custom.opts["telemetry"] == {"metadata": TRACE}
        for job_id, spec in zip(ids[:4], jobs[:4], strict=True):
            job = await queue.get_job(job_id)
            assert job is not None and job.name == spec["name"]
            assert await job.get_state() == "completed"
            assert job.returnvalue == {"doubled": spec["data"]["n"] * 2, "name": spec["name"]}
        bad = await queue.get_job(ids[4])
        assert bad is not None and await bad.get_state() == "failed"
        assert bad.attempts_made == 2 and bad.failed_reason == "psyq says no"
    seen = node("inspect.js", name, interop_redis_url, json.dumps(ids))
    assert seen["1"]["state"] == "completed"
    assert seen["1"]["returnvalue"] == {"doubled": 42, "name": "plain"}
    assert seen["my-id"]["attemptsMade"] == 1
    assert seen[ids[4]]["state"] == "failed" and seen[ids[4]]["attemptsMade"] == 2
    assert seen["counts"]["completed"] == 4 and seen["counts"]["failed"] == 1
    assert seen["counts"]["active"] == 0 and seen["counts"]["waiting"] == 0


async def test_psyq_adds_node_processes(node: Any, interop_redis_url: str) -> None:
    name = fresh_name("interop")
    async with psyq.Queue(name, connection=interop_redis_url) as queue:
        plain = await queue.add("plain", {"n": 5})
        prioritized = await queue.add("prioritized", {"n": 7}, priority=2)
        delayed = await queue.add("delayed", {"n": 9}, delay=100)
        custom = await queue.add(
            "custom",
            {"n": 4},
            job_id="psyq-id",
            remove_on_fail=False,
            telemetry={"metadata": TRACE},
        )
        bad = await queue.add("bad", {"n": 0, "fail": True}, attempts=2, backoff=10)
        outcomes = node("work.js", name, interop_redis_url, "5")
        for job in (plain, prioritized, delayed, custom):
            assert outcomes[job.id] == {
                "state": "completed",
                "value": {"doubled": job.data["n"] * 2, "name": job.name},
            }
            stored = await queue.get_job(job.id)
            assert stored is not None and await stored.get_state() == "completed"
            assert stored.returnvalue == outcomes[job.id]["value"]
            assert stored.attempts_made == 1
        assert outcomes[bad.id] == {"state": "failed", "reason": "node says no", "attemptsMade": 2}
        failed = await queue.get_job(bad.id)
        assert failed is not None and await failed.get_state() == "failed"
        assert failed.failed_reason == "node says no" and failed.attempts_made == 2
        counts = await queue.get_job_counts()
        assert counts["completed"] == 4 and counts["failed"] == 1 and counts["active"] == 0
    seen = node("inspect.js", name, interop_redis_url, json.dumps([custom.id]))
    assert seen[custom.id]["telemetry"] == {"metadata": TRACE}  # BullMQ's option, as Node reads it


async def test_a_node_flow_runs_on_psyq_workers(node: Any, interop_redis_url: str) -> None:
    parents, children = fresh_name("interop-parents"), fresh_name("interop-children")
    added = node("flow.js", parents, children, interop_redis_url)
    url = interop_redis_url
    done = asyncio.Event()

    async def parent(job: psyq.Job) -> dict[str, Any]:
        values = await job.get_children_values()
        done.set()
        return {"sum": sum(v["doubled"] for v in values.values())}

    kids = psyq.Worker(children, process, connection=url)
    tops = psyq.Worker(parents, parent, connection=url)
    try:
        await asyncio.wait_for(done.wait(), 20)
    finally:
        await kids.close()
        await tops.close()
    seen = node("inspect.js", parents, url, json.dumps([added["parent"]]))
    assert seen[added["parent"]]["state"] == "completed"
    assert seen[added["parent"]]["returnvalue"] == {"sum": 12}


async def test_node_queue_events_read_psyq_events(node: Any, interop_redis_url: str) -> None:
    name = fresh_name("interop")
    async with psyq.Queue(name, connection=interop_redis_url) as queue:
        job = await queue.add("send", {"n": 4})

        async def with_progress(job: psyq.Job) -> dict[str, Any]:
            await job.update_progress({"half": 50})
            return await process(job)

        worker = psyq.Worker(name, with_progress, connection=interop_redis_url)
        try:
            seen = await asyncio.to_thread(node, "events.js", name, interop_redis_url)
        finally:
            await worker.close()
    assert seen["added"][0] == {"jobId": job.id, "name": "send"}
    assert seen["active"][0] == {"jobId": job.id, "prev": "waiting"}
    assert seen["progress"][0] == {"jobId": job.id, "data": {"half": 50}}
    assert seen["completed"][0] == {
        "jobId": job.id,
        "returnvalue": {"doubled": 8, "name": "send"},
        "prev": "active",
    }
