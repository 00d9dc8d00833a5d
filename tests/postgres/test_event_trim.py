"""psyq's statements trim a queue's events from where this process's last trim ended, not
from the queue's first event: the index entries of trimmed events stay until a vacuum, and
a trim from the start would read every one of them (issue 19, no decay over 1M jobs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import asyncpg

from psyq.backends.base import NewJob
from psyq.backends.postgres import PostgresBackend
from psyq.backends.postgres.fastpath import TrimMarks
from psyq.backends.postgres.statements import load_statements

from .conftest import url_for

MAX_LEN = 256


async def opened(server: str, schema: str) -> PostgresBackend:
    backend = PostgresBackend(url_for(server, schema))
    await backend.open()
    return backend


async def fill(backend: PostgresBackend, admin: asyncpg.Connection, schema: str) -> None:
    """24,000 events written by psyq's add, trimmed down to MAX_LEN as they come."""
    await backend.add_jobs("q", [NewJob("x", "{}", {})])  # the layout creates the queue
    await admin.execute(
        f'INSERT INTO "{schema}".meta (queue, field, value) '
        "VALUES ('q', 'opts.maxLenEvents', $1)",
        str(MAX_LEN),
    )
    for _ in range(120):
        await backend.add_jobs("q", [NewJob("x", "{}", {}) for _ in range(100)])


def blocks(plan: dict[str, Any]) -> int:
    """Buffers of the scan of `event` under the trim's DELETE (not the deletion's own
    writes, nor its InitPlans, which write the statement's own events)."""

    def scans(node: dict[str, Any]) -> int:
        if node["Node Type"] != "ModifyTable" and node.get("Relation Name") == "event":
            return int(node["Shared Hit Blocks"] + node["Shared Read Blocks"])
        return sum(
            scans(child)
            for child in node.get("Plans", [])
            if child.get("Parent Relationship") != "InitPlan"
        )

    def find(node: dict[str, Any]) -> dict[str, Any] | None:
        kind = (node["Node Type"], node.get("Operation"), node.get("Relation Name"))
        if kind == ("ModifyTable", "Delete", "event"):
            return node
        for child in node.get("Plans", []):
            found = find(child)
            if found is not None:
                return found
        return None

    delete = find(plan["Plan"])
    assert delete is not None, "the statement did not trim"
    return scans(delete)


async def trim_reads(server: str, schema: str, since: int | None) -> int:
    """Blocks of `event` the add of one job reads to trim (it is made to cross a multiple of
    256, so it trims), sent with `since`, in a transaction rolled back."""
    conn = await asyncpg.connect(server, server_settings={"search_path": schema})
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            crossing = "SELECT (last_value / 256 + 1) * 256 - 1 FROM event_seq"
            await conn.execute(f"SELECT setval('event_seq', ({crossing}))")
            sql = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + load_statements()["fast.add"]
            args = ("q", ["x"], ["{}"], ["{}"], [0], [0], [None], [1], [False], since)
            plan = json.loads(await conn.fetchval(sql, *args))[0]
        finally:
            await tx.rollback()
    finally:
        await conn.close()
    return blocks(plan)


async def test_a_trim_reads_from_where_the_last_one_ended(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    backend = await opened(pg_server, schema)
    try:
        await fill(backend, admin, schema)
        since = backend._trims.since("q")
    finally:
        await backend.close()
    assert since is not None  # the backend remembers where its trims ended
    live = await admin.fetchval(f'SELECT count(*) FROM "{schema}".event WHERE queue = $1', "q")
    assert live <= MAX_LEN + 256 + 200  # no event left behind between two trims
    marked = await trim_reads(pg_server, schema, since)
    from_start = await trim_reads(pg_server, schema, None)
    # ~23,700 trimmed events' entries (no vacuum ran): read from the start, not from the mark
    assert marked * 3 < from_start, (marked, from_start)


def test_a_full_trim_comes_back_once_a_minute() -> None:
    now = [100.0]
    marks = TrimMarks(clock=lambda: now[0])
    assert marks.since("q") is None
    marks.record("q", None, 5000)  # a trim from the start
    marks.record("q", 5000, 4000)  # a trim that did less (maxLenEvents raised meanwhile)
    assert marks.since("q") == 5000
    marks.record("q", 5000, None)  # no trim
    marks.record("q", 5000, 7000)
    now[0] += TrimMarks.SWEEP_S - 1
    assert marks.since("q") == 7000
    now[0] += 1  # a minute after the last trim from the start: the next one starts there
    assert marks.since("q") is None
    marks.record("q", None, 9000)
    assert marks.since("q") == 9000
    assert marks.since("other") is None
