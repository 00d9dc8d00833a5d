"""The fetch reads by index once a queue holds >= 10,000 jobs: waiting jobs from jobs_by_state,
prioritized ones from their partial index (jobs_prioritized)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import asyncpg

from psyq.backends.base import NewJob
from psyq.backends.postgres import PostgresBackend
from psyq.backends.postgres.queries import load_queries

from .conftest import url_for

ROWS = 12_000
READY = {"jobs_by_state", "jobs_prioritized"}  # waiting, prioritized


def index_names(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        for value in plan.values():
            found |= index_names(value)
    elif isinstance(plan, list):
        for value in plan:
            found |= index_names(value)
    return found


async def _take_plan(conn: asyncpg.Connection) -> Any:
    take = load_queries()["move_to_active.take"]
    args = ("bull:busy", ["t1", "t2"], 1000, "w", 2, "psyq_plan", False)
    async with conn.transaction():
        return json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + take, *args))


async def test_fetch_uses_the_ready_indexes(
    pg_server: str, admin: asyncpg.Connection, fresh_schema: Callable[[], str]
) -> None:
    """With fresh statistics, and with stale ones (no ANALYZE since the rows came: the
    planner believes the table is nearly empty) on a session set up as psyq's are."""
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    try:
        jobs = [NewJob("x", "null", {"priority": i % 3} if i % 2 else {}) for i in range(ROWS)]
        for queue in ("busy", "other"):
            for start in range(0, ROWS, 4000):
                await backend.add_jobs(queue, jobs[start : start + 4000])
        settings = backend._server_settings()
    finally:
        await backend.close()
    session = await asyncpg.connect(pg_server, server_settings=settings)
    try:
        stale = await _take_plan(session)
        assert index_names(stale) >= READY, json.dumps(stale, indent=1)
        assert "Bitmap Heap Scan" not in json.dumps(stale), json.dumps(stale, indent=1)
        await admin.execute("SET search_path TO " + schema)
        await admin.execute("ANALYZE jobs")
        fresh = await _take_plan(session)
        assert index_names(fresh) >= READY, json.dumps(fresh, indent=1)
    finally:
        await session.close()
