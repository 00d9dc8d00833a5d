"""Flows: job trees across queues, parents waiting for children, failure policies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import psyq
from tests.conftest import fresh_name

from .conftest import Recorder, WorkerFactory, job_key, queue_key, wait_state


def tree(parent_queue: str, child_queue: str, *child_opts: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "parent",
        "queue_name": parent_queue,
        "data": {"p": 1},
        "children": [
            {"name": f"child{i}", "queue_name": child_queue, "data": {"i": i}, "opts": opts}
            for i, opts in enumerate(child_opts)
        ],
    }


async def test_parent_waits_for_its_children_then_runs_with_their_values(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer, make_worker: WorkerFactory
) -> None:
    children_queue = fresh_name("children")
    node = await flow_producer.add(tree(queue.name, children_queue, {}, {}))
    assert [c.job.name for c in node.children] == ["child0", "child1"]
    assert await node.job.get_state() == "waiting-children"
    assert (await queue.get_job_counts("waiting-children"))["waiting-children"] == 1
    seen: dict[str, Any] = {}

    async def parent(job: psyq.Job) -> str:
        seen.update(await job.get_children_values())
        return "parent done"

    make_worker(parent)
    make_worker(lambda job: job.data["i"] * 10, name=children_queue)
    await wait_state(queue, node.job.id, "completed")
    keys = {await job_key(queue, children_queue, c.job.id) for c in node.children}
    assert set(seen) == keys
    assert sorted(seen.values()) == [0, 10]
    assert node.children[0].job.parent_key == await job_key(queue, queue.name, node.job.id)
    assert node.job.key == node.children[0].job.parent_key


async def test_get_flow_reads_the_tree_back(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer
) -> None:
    children_queue = fresh_name("children")
    spec = tree(queue.name, children_queue, {}, {})
    spec["children"][0]["children"] = [{"name": "grandchild", "queue_name": children_queue}]
    node = await flow_producer.add(spec)
    read = await flow_producer.get_flow(node.job.id, queue.name)
    assert read is not None
    assert read.job.name == "parent"
    assert sorted(c.job.name for c in read.children) == ["child0", "child1"]
    nested = next(c for c in read.children if c.job.name == "child0")
    assert [g.job.name for g in nested.children] == ["grandchild"]
    shallow = await flow_producer.get_flow(node.job.id, queue.name, depth=1)
    assert shallow is not None and shallow.children == []
    assert await flow_producer.get_flow("missing", queue.name) is None


@pytest.mark.parametrize(
    ("policy", "parent_state"),
    [
        ("failParentOnFailure", "failed"),
        ("continueParentOnFailure", "completed"),
        ("ignoreDependencyOnFailure", "completed"),
        ("removeDependencyOnFailure", "completed"),
    ],
)
async def test_failure_policies(
    queue: psyq.Queue,
    flow_producer: psyq.FlowProducer,
    make_worker: WorkerFactory,
    policy: str,
    parent_state: str,
) -> None:
    children_queue = fresh_name("children")
    node = await flow_producer.add(tree(queue.name, children_queue, {policy: True}))

    async def parent(job: psyq.Job) -> dict[str, Any]:
        return {
            "failed": await job.get_failed_children_values(),
            "deps": await job.get_dependencies(),
        }

    def child(job: psyq.Job) -> None:
        raise RuntimeError("child broke")

    make_worker(parent)
    make_worker(child, name=children_queue)
    await wait_state(queue, node.job.id, parent_state)
    done = await queue.get_job(node.job.id)
    assert done is not None
    child_key = await job_key(queue, children_queue, node.children[0].job.id)
    if policy == "failParentOnFailure":
        # The reason names the child by its key, in the text Node BullMQ writes on the same
        # store: `<prefix>:<queue>:<id>` on Redis, `<queue>:<id>` in BullMQ 6's Postgres
        # layout (which has no key prefix)
        assert done.failed_reason == f"child {child_key} failed"
        return
    result = done.returnvalue
    if policy == "continueParentOnFailure":
        assert result["failed"] == {child_key: "child broke"}
    elif policy == "ignoreDependencyOnFailure":
        assert result["deps"]["ignored"] == {child_key: "child broke"}
    else:
        assert result["deps"]["unprocessed"] == [] and result["failed"] == {}


async def test_a_failed_child_without_policy_keeps_the_parent_waiting(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer, make_worker: WorkerFactory
) -> None:
    children_queue = fresh_name("children")
    node = await flow_producer.add(tree(queue.name, children_queue, {}))
    child_queue = psyq.Queue(children_queue, connection=queue._connection)
    try:
        make_worker(lambda job: 1 / 0, name=children_queue)
        await wait_state(child_queue, node.children[0].job.id, "failed")
        assert await node.job.get_state() == "waiting-children"
        deps = await node.job.get_dependencies()
        assert deps["unprocessed"] == [
            await job_key(queue, children_queue, node.children[0].job.id)
        ]
    finally:
        await child_queue.close()


async def test_removing_a_parent_removes_its_children(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer
) -> None:
    children_queue = fresh_name("children")
    node = await flow_producer.add(tree(queue.name, children_queue, {}, {}))
    await node.job.remove()
    assert await queue.get_job(node.job.id) is None
    for child in node.children:
        assert await child.job.get_state() == "unknown"


async def test_removing_the_last_pending_child_releases_the_parent(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer
) -> None:
    children_queue = fresh_name("children")
    node = await flow_producer.add(tree(queue.name, children_queue, {}))
    await node.children[0].job.remove()
    assert await node.job.get_state() == "waiting"


async def test_dynamic_children_with_move_to_waiting_children(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    children_name = fresh_name("children")
    children = psyq.Queue(children_name, connection=queue._connection)
    steps: list[str] = []
    waiting = asyncio.Event()

    async def parent(job: psyq.Job, token: str) -> str:
        if not steps:
            steps.append("spawn")
            parent_ref = {"id": job.id, "queue": job.queue_qualified_name}
            assert parent_ref["queue"] == await queue_key(queue)
            await children.add("kid", {"n": 2}, parent=parent_ref)
            assert await job.move_to_waiting_children(token)
            waiting.set()  # the child runs only now, so the parent surely waits for it
            raise psyq.WaitingChildrenError()
        steps.append("resume")
        return str(await job.get_children_values())

    try:
        job = await queue.add("parent")
        make_worker(parent)
        await asyncio.wait_for(waiting.wait(), 5)
        make_worker(lambda job: job.data["n"] * 2, name=children_name)
        await wait_state(queue, job.id, "completed")
        assert steps == ["spawn", "resume"]
        done = await queue.get_job(job.id)
        assert done is not None and "4" in str(done.returnvalue)
    finally:
        await children.close()


async def test_a_child_of_a_missing_parent_is_refused(queue: psyq.Queue) -> None:
    with pytest.raises(psyq.JobNotFoundError):
        await queue.add("orphan", parent={"id": "nope", "queue": await queue_key(queue)})
    assert await queue.count() == 0


async def test_a_flow_whose_root_names_a_missing_parent_is_refused(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer
) -> None:
    missing = {"id": "nope", "queue": await queue_key(queue)}
    spec = {
        "name": "root",
        "queue_name": queue.name,
        "opts": {"parent": missing},
        "children": [{"name": "kid", "queue_name": queue.name}],
    }
    with pytest.raises(psyq.JobNotFoundError):
        await flow_producer.add(spec)
    assert await queue.count() == 0 and await queue.get_job_counts("waiting-children") == {
        "waiting-children": 0
    }


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"name": "p", "children": []}, "queue_name"),
        ({"name": "p", "queue_name": "a:b"}, "a:b"),
        ({"queue_name": "q"}, "name"),
        ({"name": "p", "queue_name": "q", "children": [{"name": "c"}]}, "children[0]"),
        ({"name": "p", "queue_name": "q", "opts": {"bogus": 1}}, "bogus"),
    ],
)
async def test_bad_flows_raise_before_anything_is_written(
    flow_producer: psyq.FlowProducer, bad: dict[str, Any], message: str
) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match=message.replace("[", r"\[")):
        await flow_producer.add(bad)


async def test_a_cycle_is_refused(flow_producer: psyq.FlowProducer) -> None:
    node: dict[str, Any] = {"name": "p", "queue_name": "q"}
    node["children"] = [node]
    with pytest.raises(psyq.InvalidOptionsError, match="cycle"):
        await flow_producer.add(node)


async def test_add_bulk_of_flows_is_atomic(
    queue: psyq.Queue, flow_producer: psyq.FlowProducer
) -> None:
    good = tree(queue.name, queue.name, {})
    with pytest.raises(psyq.InvalidOptionsError):
        await flow_producer.add_bulk([good, {"name": "bad"}])
    assert await queue.count() == 0
    nodes = await flow_producer.add_bulk([good, good])
    assert len(nodes) == 2
    assert await queue.count() == 4


async def test_a_child_added_to_a_running_parent_does_not_run_it_again(
    queue: psyq.Queue,
    flow_producer: psyq.FlowProducer,
    make_worker: WorkerFactory,
    backend_url: str,
) -> None:
    """Issue 41 (defect 1). As in BullMQ, a flow naming a running job as its parent leaves
    that job active (addParentJob finds it: `duplicated`) and makes the child one of its
    dependencies; the parent's completion is then refused while the child is pending
    (moveToFinished's -4), and the worker fails the parent with that error, as Node's
    worker does. The parent runs once on every store; the refusal is no worker `error`."""
    children_queue = fresh_name("children")
    started, release = asyncio.Event(), asyncio.Event()
    runs: list[str] = []

    async def parent(job: psyq.Job) -> int:
        runs.append(job.id)
        started.set()
        await release.wait()
        return 1

    await queue.add("parent", {}, {"jobId": "shared"})
    worker = make_worker(parent)
    rec = Recorder(worker, "failed", "error")
    await asyncio.wait_for(started.wait(), 5)
    child = {"name": "child", "queue_name": children_queue, "data": {}}
    flow = {"name": "parent", "queue_name": queue.name, "opts": {"jobId": "shared"}}
    node = await flow_producer.add({**flow, "children": [child]})
    assert node.job.id == "shared"
    assert await queue.get_job_state("shared") == "active"
    release.set()
    [(_job, error)] = await rec.wait("failed")
    assert isinstance(error, psyq.JobStateError) and "children" in str(error)
    make_worker(lambda job: 2, name=children_queue)
    async with psyq.Queue(children_queue, connection=backend_url) as children:
        await wait_state(children, node.children[0].job.id, "completed")
    assert runs == ["shared"]
    assert await queue.get_job_state("shared") == "failed"
    assert rec.events["error"] == []


@pytest.mark.parametrize(
    ("child_opts", "worker_options"),
    [
        ({"removeOnComplete": True}, {}),
        ({"removeOnComplete": {"count": 0}}, {}),
        ({}, {"remove_on_complete": True}),
    ],
    ids=["removeOnComplete-true", "removeOnComplete-count-0", "worker-remove_on_complete"],
)
async def test_a_child_removed_when_it_completes_still_releases_its_parent(
    queue: psyq.Queue,
    flow_producer: psyq.FlowProducer,
    make_worker: WorkerFactory,
    child_opts: dict[str, Any],
    worker_options: dict[str, Any],
) -> None:
    """As BullMQ's moveToFinished: the child's value goes to its parent before the child is
    removed, so the parent runs and reads it (BullMQ's serial chain with removeOnComplete)."""
    children_queue = fresh_name("children")
    node = await flow_producer.add(tree(queue.name, children_queue, child_opts))
    seen: dict[str, Any] = {}

    async def parent(job: psyq.Job) -> str:
        seen.update(await job.get_children_values())
        return "parent done"

    make_worker(parent)
    make_worker(lambda job: "child value", name=children_queue, **worker_options)
    await wait_state(queue, node.job.id, "completed")
    assert seen == {await job_key(queue, children_queue, node.children[0].job.id): "child value"}
    assert await node.children[0].job.get_state() == "unknown"
