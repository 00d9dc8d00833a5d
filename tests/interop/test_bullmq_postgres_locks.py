"""Issue 40 beside Node BullMQ 6: Node producers doing deduplicated addBulk (50 jobs,
ids drawn from 40, priorities 0-2) beside psyq's producers (the same, plus children of
shared parents and flows with custom ids) and a psyq worker, on a schema psyq created and
Node migrated to its own version: no call of Node's fails, and Postgres counts no
deadlock in the database (one of the test's own)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import psyq
from tests.conftest import fresh_name
from tests.postgres.deadlocks import deadlocks, own_database, sessions_gone
from tests.postgres.lock_load import Load, make_parents, produce

pytestmark = pytest.mark.timeout(240)  # the first test of a run installs bullmq from npm

NODE_PRODUCERS, PSYQ_PRODUCERS, BATCHES, PARENTS = 2, 2, 15, 8


async def test_node_and_psyq_producers_never_deadlock(node_pg: Any, pg_server: str) -> None:
    async with own_database(pg_server, "nodelocks") as url:
        queue, parents = fresh_name("locks"), fresh_name("parents")
        await make_parents(url, queue, parents, PARENTS)  # psyq creates the schema

        def node(batches: int, seed: int) -> Any:
            return node_pg("add_bulk_dedup.js", queue, url, "bullmq", str(batches), str(seed))

        await asyncio.to_thread(node, 1, 0)  # Node migrates it first, as a Node app would
        before = await deadlocks(pg_server, url)
        loads = [Load(url, queue, parents, PARENTS, BATCHES, s) for s in range(PSYQ_PRODUCERS)]
        async with psyq.Worker(queue, lambda job: job.id, connection=url, concurrency=20):
            done = await asyncio.gather(
                *(asyncio.to_thread(node, BATCHES, s + 1) for s in range(NODE_PRODUCERS)),
                *(produce(load) for load in loads),
            )
        await sessions_gone(pg_server, url)
        nodes = done[:NODE_PRODUCERS]
        assert [n["failed"] for n in nodes] == [0] * NODE_PRODUCERS, nodes
        assert [n["calls"] for n in nodes] == [BATCHES] * NODE_PRODUCERS
        assert await deadlocks(pg_server, url) == before
