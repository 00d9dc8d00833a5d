"""Grouped jobs and an open-source Node BullMQ worker on the same Redis queue.

BullMQ Pro's groups are not in open-source BullMQ: its worker takes from `wait` and
`prioritized` only. psyq keeps a group's waiting jobs in a line of their own, so a Node
worker on the queue takes the plain jobs and never a grouped one (it could not hold the
group's limits); psyq's workers serve the groups."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import psyq
from tests.conftest import fresh_name
from tests.interop.conftest import Sides, _use
from tests.interop.sides import NodeDriver, NodeSide, PsyqSide
from tests.polling import eventually

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["5", "6"], ids=["redis-bullmq5", "redis-bullmq6"])
async def redis_sides(
    request: pytest.FixtureRequest, node_drivers: Callable[[str], NodeDriver]
) -> AsyncIterator[Sides]:
    driver = node_drivers(request.param)
    url = await _use(request, driver, "redis")
    node, ours = NodeSide(driver, "redis"), PsyqSide(url)
    try:
        yield Sides(node, ours, request.param, "redis")
    finally:
        await ours.close()
        await node.close()


async def test_a_node_worker_takes_plain_jobs_and_leaves_grouped_ones(
    redis_sides: Sides,
) -> None:
    name = fresh_name("groups-node")
    queue = redis_sides.psyq.queue(name)
    grouped = await queue.add_bulk(
        [{"name": f"g{i}", "data": {}, "opts": {"group": {"id": f"t{i % 2}"}}} for i in range(4)]
    )
    plain = await queue.add("plain", {})
    handle = await redis_sides.node.start_worker(name)

    async def plain_done() -> bool:
        return await queue.get_job_state(plain.id) == "completed"

    await eventually(plain_done, "Node completed the plain job", 20)
    later = await queue.add("plain-later", {})  # Node is still taking: it gets this one

    async def later_done() -> bool:
        return await queue.get_job_state(later.id) == "completed"

    await eventually(later_done, "Node completed the later plain job", 20)
    assert await redis_sides.node.stop_worker(handle) == []
    for job in grouped:
        assert await queue.get_job_state(job.id) == "waiting"
    assert await queue.get_groups_job_count() == 4
    node_counts = await redis_sides.node.counts(name, "wait", "active", "completed")
    assert node_counts == {"wait": 0, "active": 0, "completed": 2}  # Node sees no line
    done: list[str] = []
    worker = psyq.Worker(
        name, lambda job: done.append(job.name), connection=redis_sides.psyq.url, drain_delay=1
    )
    try:
        await eventually(lambda: len(done) == 4, "psyq ran the grouped jobs", 20)
    finally:
        await worker.close()
    assert done == ["g0", "g1", "g2", "g3"]  # t0, t1, t0, t1: round robin


async def test_node_reads_a_grouped_job_with_its_group(redis_sides: Sides) -> None:
    name = fresh_name("groups-node")
    queue = redis_sides.psyq.queue(name)
    job = await queue.add("g", {"n": 1}, group={"id": "tenant", "priority": 2})
    seen: dict[str, Any] | None = await redis_sides.node.job(name, job.id)
    assert seen is not None
    assert seen["opts"]["group"] == {"id": "tenant", "priority": 2}
