"""The group take's plans on tables Postgres has no statistics for (a new schema; autovacuum
off, or not run yet). Without statistics the planner takes every index of `job` for equally
selective, and the plan it picks for a take can read the delayed-jobs index, which holds
every group's line, instead of each line's first jobs (sql/groups.sql: psyq_group_take,
psyq_group_turns and psyq_group_lined run with enable_sort off for that). The work of one
take is counted in buffers (EXPLAIN's, nested statements included), which do not depend on
the machine's speed: over 10,000 groups a take of 10 reads ~550 with the plans groups.sql
asks for, and ~30,000 with the planner's own."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg

from psyq.backends.base import NewJob
from psyq.backends.postgres import PostgresBackend

from .conftest import opened_backend

GROUPS = 10_000
MOST_BLOCKS_PER_TAKE = 5_000  # of 10 tokens over 10,000 groups


def blocks(plan_json: str) -> int:
    plan: dict[str, Any] = json.loads(plan_json)[0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


async def fill(backend: PostgresBackend, jobs: int) -> None:
    for start in range(0, jobs, 1000):
        batch = [
            NewJob("j", "{}", {"group": {"id": str(i % GROUPS)}})
            for i in range(start, start + 1000)
        ]
        await backend.add_jobs("q", batch)


async def test_a_take_over_10000_groups_without_statistics_reads_each_line_not_them_all(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    async with opened_backend(pg_server, schema) as backend:
        await fill(backend, 2 * GROUPS)
        await admin.execute(f'SET search_path TO "{schema}"')
        analysed = "SELECT count(*) FROM pg_stats WHERE schemaname = $1 AND tablename = 'job'"
        assert await admin.fetchval(analysed, schema) == 0  # the case under test
        take = (
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM psyq_group_take("
            "'q', $1::text[], 30000, 'w', NULL, NULL, NULL, NULL, NULL)"
        )
        lined = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT psyq_group_lined('q', $1::text[])"
        async with admin.transaction():
            read = []
            for _ in range(3):  # the first call also reads the catalog to plan
                tokens = [uuid.uuid4().hex for _ in range(10)]
                read.append(blocks(await admin.fetchval(take, tokens)))
            taken = await admin.fetchval("SELECT count(*) FROM job WHERE state = 'active'")
            some = [str(i) for i in range(10)]
            lined_read = blocks(await admin.fetchval(lined, some))
        assert taken == 30
        assert max(read[1:]) < MOST_BLOCKS_PER_TAKE, read
        assert lined_read < 500
