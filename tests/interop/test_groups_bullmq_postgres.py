"""Grouped jobs and a Node BullMQ 6 worker on the same Postgres queue (BullMQ 6's own
layout). BullMQ 6 has no groups: psyq keeps a group's waiting jobs out of the rows a
BullMQ worker takes, so the Node worker takes the plain jobs only, even those added after
the grouped ones, and psyq's workers serve the groups round robin."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import psyq
from tests.conftest import fresh_name
from tests.polling import eventually
from tests.postgres.conftest import url_for

pytestmark = pytest.mark.timeout(300)


async def test_a_node_worker_takes_plain_jobs_and_leaves_grouped_ones(
    node_pg: Any, pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema, name = fresh_schema(), fresh_name("groups-node")
    url = url_for(pg_server, schema)
    async with psyq.Queue(name, connection=url) as queue:
        grouped = await queue.add_bulk(
            [
                {"name": f"g{i}", "data": {"n": i}, "opts": {"group": {"id": f"t{i % 2}"}}}
                for i in range(4)
            ]
        )
        plain = [await queue.add(f"plain{i}", {"n": i}) for i in range(2)]
        # Node takes in FIFO order: had it seen the grouped jobs (added first), they would
        # be among the two it ran.
        outcomes = node_pg("work.js", name, pg_server, schema, str(len(plain)))
        assert sorted(outcomes) == sorted(job.id for job in plain)
        for job in grouped:
            assert await queue.get_job_state(job.id) == "waiting"
        assert await queue.get_groups_job_count() == 4
        seen = node_pg("inspect.js", name, pg_server, schema, json.dumps([grouped[0].id]))
        assert seen[grouped[0].id]["name"] == "g0"  # Node reads the job by its id
        assert seen["counts"]["active"] == 0 and seen["counts"]["completed"] == 2
        done: list[str] = []
        worker = psyq.Worker(name, lambda job: done.append(job.name), connection=url)
        try:
            await eventually(lambda: len(done) == 4, "psyq ran the grouped jobs", 20)
        finally:
            await worker.close()
        assert done == ["g0", "g1", "g2", "g3"]  # t0, t1, t0, t1: round robin
