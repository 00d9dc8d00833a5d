"""Node BullMQ 6, bullmq for Python 3.4 and psyq on the same Postgres queues (BullMQ 6's
own layout, psyq's postgresql://): jobs added by one are processed by the other, with
the same results, progress, attempts and states seen from both sides, and Node's
QueueEvents sees what psyq workers finish. Each test uses a fresh schema; the first client
to open it migrates it (psyq with the bullmq package's migrations, Node with its own on
top, bullmq for Python with its own)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

import psyq
import psyq.compat.bullmq as bullmq
from tests.conftest import fresh_name
from tests.interop.psyq_worker import process, run_psyq_worker
from tests.polling import eventually
from tests.postgres.conftest import conninfo_for, url_for

pytestmark = pytest.mark.timeout(300)

NODE_JOBS: list[dict[str, Any]] = [
    {"name": "plain", "data": {"n": 21}},
    {"name": "prioritized", "data": {"n": 1}, "opts": {"priority": 3}},
    {"name": "delayed", "data": {"n": 2}, "opts": {"delay": 100}},
    {"name": "custom", "data": {"n": 3}, "opts": {"jobId": "my-id", "attempts": 2}},
    {"name": "bad", "data": {"n": 0, "fail": True}, "opts": {"attempts": 2, "backoff": 10}},
]


async def test_node_adds_psyq_processes(
    node_pg: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema, name = fresh_schema(), fresh_name("interop")
    url = url_for(pg_server, schema)
    ids = node_pg("add.js", name, pg_server, schema, json.dumps(NODE_JOBS))
    assert ids == ["1", "2", "3", "my-id", "4"]  # the layout's counter skips custom ids
    await run_psyq_worker(name, url, len(NODE_JOBS))
    # Node's QueueEvents reads the stream from its start once the work is done: read live,
    # its cursor can pass an event whose writer commits after a later-numbered one (ids
    # are numbered at write, seen at commit; Node's reader has no guard, psyq's waits for
    # the writers in flight: tests/postgres/test_event_order.py). The interop matrix's
    # QueueEvents case reads live.
    events = asyncio.to_thread(node_pg, "events.js", name, pg_server, schema, str(len(ids)))
    async with psyq.Queue(name, connection=url) as queue:
        for job_id, spec in zip(ids[:4], NODE_JOBS[:4], strict=True):
            job = await queue.get_job(job_id)
            assert job is not None and job.name == spec["name"] and job.data == spec["data"]
            assert await job.get_state() == "completed"
            assert job.returnvalue == {"doubled": spec["data"]["n"] * 2, "name": spec["name"]}
            assert job.attempts_made == 1
        bad = await queue.get_job(ids[4])
        assert bad is not None and await bad.get_state() == "failed"
        assert bad.attempts_made == 2 and bad.failed_reason == "psyq says no"
    seen = node_pg("inspect.js", name, pg_server, schema, json.dumps(ids))
    for job_id, spec in zip(ids[:4], NODE_JOBS[:4], strict=True):
        assert seen[job_id]["state"] == "completed"
        assert seen[job_id]["returnvalue"] == {
            "doubled": spec["data"]["n"] * 2,
            "name": spec["name"],
        }
        assert seen[job_id]["attemptsMade"] == 1
    assert seen[ids[4]]["state"] == "failed" and seen[ids[4]]["attemptsMade"] == 2
    assert seen[ids[4]]["failedReason"] == "psyq says no"
    assert seen["counts"] == {
        "wait": 0,
        "active": 0,
        "completed": 4,
        "failed": 1,
        "delayed": 0,
        "prioritized": 0,
    }
    heard = await asyncio.wait_for(events, 60)
    assert heard["completed"]["1"] == {"doubled": 42, "name": "plain"}
    assert set(heard["completed"]) == set(ids[:4])
    assert heard["failed"] == {ids[4]: "psyq says no"}


async def test_psyq_adds_node_processes(
    node_pg: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema, name = fresh_schema(), fresh_name("interop")
    url = url_for(pg_server, schema)
    async with psyq.Queue(name, connection=url) as queue:
        plain = await queue.add("plain", {"n": 21})
        prioritized = await queue.add("prioritized", {"n": 1}, priority=2)
        delayed = await queue.add("delayed", {"n": 2}, delay=100)
        bad = await queue.add("bad", {"n": 0, "fail": True}, attempts=2, backoff=10)
        jobs = [plain, prioritized, delayed, bad]
        assert [job.id for job in jobs] == ["1", "2", "3", "4"]
        outcomes = node_pg("work.js", name, pg_server, schema, str(len(jobs)))
        assert outcomes[plain.id] == {
            "state": "completed",
            "value": {"doubled": 42, "name": "plain"},
        }
        assert outcomes[bad.id]["state"] == "failed"
        for job in jobs[:3]:
            stored = await queue.get_job(job.id)
            assert stored is not None and await stored.get_state() == "completed"
            assert stored.progress == 50
            assert stored.returnvalue == {"doubled": job.data["n"] * 2, "name": job.name}
            assert stored.attempts_made == 1
        failed = await queue.get_job(bad.id)
        assert failed is not None and await failed.get_state() == "failed"
        assert failed.attempts_made == 2 and failed.failed_reason == "node says no"
        counts = await queue.get_job_counts("waiting", "active", "completed", "failed")
        assert counts == {"waiting": 0, "active": 0, "completed": 3, "failed": 1}


PY_JOBS: list[dict[str, Any]] = [
    {"name": "plain", "data": {"n": 21}},
    {"name": "prioritized", "data": {"n": 1}, "opts": {"priority": 3}},
    {"name": "delayed", "data": {"n": 2}, "opts": {"delay": 100}},
    {"name": "bad", "data": {"n": 0, "fail": True}, "opts": {"attempts": 2, "backoff": 10}},
]


async def test_bullmq_for_python_adds_psyq_processes(
    bullmq_py: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """bullmq for Python 3.4 creates the schema (its ledger has no minimum-client column)."""
    schema, name = fresh_schema(), fresh_name("interop")
    url = url_for(pg_server, schema)
    ids = bullmq_py("add", name, pg_server, schema, json.dumps(PY_JOBS))
    assert ids == ["1", "2", "3", "4"]
    await run_psyq_worker(name, url, len(PY_JOBS))
    seen = bullmq_py("inspect", name, pg_server, schema, json.dumps(ids))
    for job_id, spec in zip(ids[:3], PY_JOBS[:3], strict=True):
        assert seen[job_id]["state"] == "completed"
        assert seen[job_id]["returnvalue"] == {
            "doubled": spec["data"]["n"] * 2,
            "name": spec["name"],
        }
        assert seen[job_id]["attemptsMade"] == 1
    assert seen[ids[3]]["state"] == "failed" and seen[ids[3]]["attemptsMade"] == 2
    assert seen[ids[3]]["failedReason"] == "psyq says no"


async def test_psyq_adds_bullmq_for_python_processes(
    bullmq_py: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema, name = fresh_schema(), fresh_name("interop")
    url = url_for(pg_server, schema)
    async with psyq.Queue(name, connection=url) as queue:
        plain = await queue.add("plain", {"n": 21})
        prioritized = await queue.add("prioritized", {"n": 1}, priority=2)
        bad = await queue.add("bad", {"n": 0, "fail": True}, attempts=2, backoff=10)
        outcomes = bullmq_py("work", name, pg_server, schema, "3")
        assert outcomes[plain.id] == {
            "state": "completed",
            "value": {"doubled": 42, "name": "plain"},
        }
        assert outcomes[bad.id]["state"] == "failed"
        for job in (plain, prioritized):
            stored = await queue.get_job(job.id)
            assert stored is not None and await stored.get_state() == "completed"
            assert stored.progress == 50 and stored.attempts_made == 1
            assert stored.returnvalue == {"doubled": job.data["n"] * 2, "name": job.name}
        failed = await queue.get_job(bad.id)
        assert failed is not None and await failed.get_state() == "failed"
        assert failed.attempts_made == 2 and failed.failed_reason == "bullmq-py says no"


async def test_a_node_flow_runs_on_psyq_workers(
    node_pg: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema = fresh_schema()
    parents, children = fresh_name("interop-parents"), fresh_name("interop-children")
    url = url_for(pg_server, schema)
    added = node_pg("flow.js", parents, children, pg_server, schema)
    done = asyncio.Event()

    async def parent(job: psyq.Job) -> dict[str, Any]:
        values = await job.get_children_values()
        done.set()
        return {"sum": sum(v["doubled"] for v in values.values()), "keys": sorted(values)}

    kids = psyq.Worker(children, process, connection=url)
    tops = psyq.Worker(parents, parent, connection=url)
    try:
        await asyncio.wait_for(done.wait(), 20)
    finally:
        await kids.close()
        await tops.close()
    seen = node_pg("inspect.js", parents, pg_server, schema, json.dumps([added["parent"]]))
    assert seen[added["parent"]]["state"] == "completed"
    # psyq names the children as the layout and Node do: `<queue>:<id>`, no prefix
    keys = sorted(f"{children}:{child}" for child in added["children"])
    assert seen[added["parent"]]["returnvalue"] == {"sum": 12, "keys": keys}
    async with psyq.Queue(children, connection=url) as queue:
        child = await queue.get_job(added["children"][0])
        assert child is not None and child.parent_key == f"{parents}:{added['parent']}"
        assert child.key == f"{children}:{child.id}" and child.queue_qualified_name == children


async def test_a_psyq_flow_runs_on_node_workers(
    node_pg: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema = fresh_schema()
    parents, children = fresh_name("interop-parents"), fresh_name("interop-children")
    url = url_for(pg_server, schema)
    async with psyq.FlowProducer(connection=url) as producer:
        tree = await producer.add(
            {
                "name": "parent",
                "queue_name": parents,
                "children": [
                    {"name": "child", "queue_name": children, "data": {"n": n}} for n in (1, 2, 3)
                ],
            }
        )
    result = node_pg("work_flow.js", parents, children, pg_server, schema)
    keys = sorted(f"{children}:{child.job.id}" for child in tree.children)  # the layout's keys
    assert result == {"sum": 12, "keys": keys}
    async with psyq.Queue(parents, connection=url) as queue:
        parent = await queue.get_job(tree.job.id)
        assert parent is not None and await parent.get_state() == "completed"
        assert parent.returnvalue == result
        values = await parent.get_children_values()
        assert sorted(values) == keys  # as Node names them


async def test_node_lists_a_running_psyq_queue_events(
    node_pg: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """Node BullMQ 6's getQueueEvents lists the sessions named `<queue>:qe`: a psyq
    QueueEvents holds one while it runs, and none is left once it closes."""
    schema, name = fresh_schema(), fresh_name("interop")
    url = url_for(pg_server, schema)
    assert node_pg("queue_events.js", name, pg_server, schema)["count"] == 0
    events = psyq.QueueEvents(name, connection=url, blocking_timeout=200)
    try:
        await events.wait_until_ready(10)
        listed = await _node_until(node_pg, name, pg_server, schema, lambda n: n == 1)
        assert listed["names"] == [name]  # Node's client-list parser names it by its queue
    finally:
        await events.close()
    await _node_until(node_pg, name, pg_server, schema, lambda n: n == 0)


async def _node_until(
    node_pg: Any, name: str, server: str, schema: str, wanted: Callable[[int], bool]
) -> Any:
    """What Node's getQueueEvents lists, once its count is `wanted` (polled, 20 s at most)."""

    seen: Any = None

    async def listed() -> Any:
        nonlocal seen
        seen = await asyncio.to_thread(node_pg, "queue_events.js", name, server, schema)
        return seen if wanted(seen["count"]) else None

    try:
        return await eventually(listed, "Node's getQueueEvents listing the count wanted", 20, 0.1)
    except AssertionError as late:
        raise AssertionError(f"{late}; Node lists {seen}") from None


async def test_a_ported_program_and_bullmq_share_one_schema_both_ways(
    bullmq_py: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """The ported program (psyq.compat.bullmq given bullmq's own Postgres options: a conninfo
    string and a schema) works jobs bullmq for Python adds, and adds jobs a bullmq worker
    works, on one queue of one schema."""
    schema, name = fresh_schema(), fresh_name("ported")
    conninfo = conninfo_for(pg_server)
    opts = {"backend": "postgres", "connection": conninfo, "schema": schema}
    ids = bullmq_py("add", name, pg_server, schema, json.dumps(PY_JOBS[:2]))
    await _work_ported(name, opts, len(ids))
    seen = bullmq_py("inspect", name, pg_server, schema, json.dumps(ids))
    for job_id, spec in zip(ids, PY_JOBS[:2], strict=True):
        assert seen[job_id]["state"] == "completed" and seen[job_id]["progress"] == 50
        assert seen[job_id]["returnvalue"] == {"doubled": spec["data"]["n"] * 2, "ported": True}
    queue = bullmq.Queue(name, opts)
    added = [await queue.add("plain", {"n": n}) for n in (5, 6)]
    outcomes = bullmq_py("work", name, pg_server, schema, "2")
    for job in added:
        assert job.id is not None
        assert outcomes[job.id] == {
            "state": "completed",
            "value": {"doubled": job.data["n"] * 2, "name": "plain"},
        }
        stored = await bullmq.Job.fromId(queue, job.id)
        assert stored is not None
        assert (stored.progress, stored.attemptsMade) == (50, 1)
        assert stored.returnvalue == {"doubled": job.data["n"] * 2, "name": "plain"}
    await queue.close()


async def _work_ported(name: str, opts: dict[str, Any], count: int) -> None:
    """The ported program's worker, until `count` jobs completed."""
    done: list[str] = []
    all_done = asyncio.Event()

    async def process(job: bullmq.Job, token: str) -> dict[str, Any]:
        await job.updateProgress(50)
        return {"doubled": job.data["n"] * 2, "ported": True}

    def completed(job: bullmq.Job, result: Any) -> None:
        assert job.id is not None
        done.append(job.id)
        if len(done) >= count:
            all_done.set()

    worker = bullmq.Worker(name, process, opts)
    worker.on("completed", completed)
    try:
        await asyncio.wait_for(all_done.wait(), 20)
    finally:
        await worker.close()


async def test_node_processes_jobs_psyq_added_in_a_committed_transaction(
    node_pg: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """Jobs psyq added inside the application's transaction (docs/transactions.md) are
    Node BullMQ 6's to process once committed; a rolled-back add leaves Node nothing."""
    schema, name = fresh_schema(), fresh_name("interop")
    url = url_for(pg_server, schema)
    async with psyq.Queue(name, connection=url) as queue:
        conn = await asyncpg.connect(pg_server)
        try:
            with pytest.raises(ZeroDivisionError):
                async with conn.transaction():
                    await queue.add("gone", {"n": 5}, transaction=conn, jobId="rolled-back")
                    1 / 0  # noqa: B018 - the application's transaction fails
            async with conn.transaction():
                one = await queue.add("plain", {"n": 21}, transaction=conn)
                [two] = await queue.add_bulk(
                    [{"name": "custom", "data": {"n": 4}, "opts": {"jobId": "tx-id"}}],
                    transaction=conn,
                )
        finally:
            await conn.close()
        outcomes = node_pg("work.js", name, pg_server, schema, "2")
        assert outcomes == {
            one.id: {"state": "completed", "value": {"doubled": 42, "name": "plain"}},
            two.id: {"state": "completed", "value": {"doubled": 8, "name": "custom"}},
        }
        assert await queue.get_job("rolled-back") is None
        counts = await queue.get_job_counts("waiting", "active", "completed")
        assert counts == {"waiting": 0, "active": 0, "completed": 2}
