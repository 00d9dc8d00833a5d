"""Exporting a SQLite file from its tables (`SqliteExport`): the same pages as the engine
rebuilt from the file, without the rebuild; ownership and cursors."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import JOB_STATES, BackendAdapter, Completed, Failed, FetchRequest
from psyq.backends.sqlite.export import SqliteExport
from psyq.errors import PsyqError


async def fill(url: str) -> None:
    """Two queues holding every state: priorities, delays, LIFO, a flow, logs, a paused
    queue, an active job, finished jobs."""
    async with psyq.Queue("main", connection=url) as queue:
        await queue.add_bulk([{"name": "plain", "data": {"i": i}} for i in range(12)])
        backend = await open_backend(url)
        try:
            await settle(backend)
        finally:
            await release_backend(backend)
        await queue.add("last-in", {"x": 1}, lifo=True)
        for index, priority in enumerate((5, 1, 5, 3, 1)):
            await queue.add("urgent", {"i": index}, priority=priority)
        for index, delay in enumerate((90_000, 30_000, 90_000, 60_000)):
            await queue.add("later", {"i": index}, delay=delay)
        await queue.add("custom", {"c": 1}, job_id="custom-id")
        await queue.upsert_job_scheduler("tick", {"every": 60_000}, {"name": "tick"})
        async with psyq.FlowProducer(connection=url) as producer:
            await producer.add(
                {
                    "name": "parent",
                    "queue_name": "main",
                    "children": [
                        {"name": "kid", "queue_name": "side"},
                        {"name": "kid2", "queue_name": "main"},
                    ],
                }
            )
    async with psyq.Queue("side", connection=url) as side:
        await side.add_bulk([{"name": "bulk", "data": {"i": i}} for i in range(5)])
        await side.pause()


async def settle(backend: BackendAdapter) -> None:
    """Take six jobs: complete three (one with logs), fail two, keep one active."""
    tokens = [f"t{i}" for i in range(6)]
    taken = await backend.move_to_active("main", FetchRequest(tokens, 600_000))
    await backend.add_log("main", taken[0].id, "first row", None)
    await backend.add_log("main", taken[0].id, "second row", None)
    for record, token in zip(taken[:3], tokens, strict=False):
        await backend.move_to_finished("main", record.id, token, Completed('{"ok": 1}'))
    for record, token in zip(taken[3:5], tokens[3:5], strict=True):
        await backend.move_to_finished("main", record.id, token, Failed("boom", ["at 1"]))


async def read_all(source: Any, queue: str, limit: int) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        page = await source.export_jobs(queue, cursor, limit)
        cursor = page.next_cursor
        pages.append(
            {
                "jobs": [asdict(job) for job in page.jobs],
                "logs": page.logs,
                "due": page.due,
                "deps": page.deps,
                "last": cursor is None,
            }
        )
        if cursor is None:
            return pages


async def test_pages_equal_the_engines_for_every_state(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    await fill(url)
    engine = await open_backend(url)
    expected: dict[str, Any] = {}
    try:
        queues = await engine.list_queues()
        for queue in queues:
            expected[queue] = {
                "counts": await engine.get_job_counts(queue, list(JOB_STATES)),
                "meta": await engine.get_queue_meta(queue),
                **{str(limit): await read_all(engine, queue, limit) for limit in (1, 4, 1000)},
            }
    finally:
        await release_backend(engine)
    reader = SqliteExport(url)
    await reader.open()
    try:
        assert await reader.list_queues() == queues == ["main", "side"]
        for queue in queues:
            assert expected[queue] == {
                "counts": await reader.get_job_counts(queue, list(JOB_STATES)),
                "meta": await reader.get_queue_meta(queue),
                **{str(limit): await read_all(reader, queue, limit) for limit in (1, 4, 1000)},
            }
    finally:
        await reader.close()
    states = {job["state"] for page in expected["main"]["1000"] for job in page["jobs"]}
    assert states == {
        "waiting",
        "prioritized",
        "delayed",
        "active",
        "completed",
        "failed",
        "waiting-children",
    }
    assert expected["side"]["counts"]["paused"] == 6  # five, and a child of the flow


async def test_the_owner_keeps_writers_out_and_readers_share(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    async with psyq.Queue("q", connection=url) as queue:
        await queue.add_bulk([{"name": "n", "data": {"i": i}} for i in range(3)])
    owner, beside = SqliteExport(url), SqliteExport(url, own=False)
    await owner.open()
    try:
        with pytest.raises(PsyqError, match="in use by pid"):
            await SqliteExport(url).open()
        await beside.open()
        page = await beside.export_jobs("q", None, 10)
        assert [job.id for job in page.jobs] == ["1", "2", "3"]
    finally:
        await beside.close()
        await owner.close()


async def test_a_cursor_must_be_the_next_page(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    async with psyq.Queue("q", connection=url) as queue:
        await queue.add_bulk([{"name": "n", "data": {"i": i}} for i in range(5)])
    reader = SqliteExport(url)
    await reader.open()
    try:
        first = await reader.export_jobs("q", None, 2)
        assert first.next_cursor is not None
        token = first.next_cursor.partition(":")[0]
        with pytest.raises(PsyqError, match="not the next page"):
            await reader.export_jobs("q", f"{token}:4", 2)
        with pytest.raises(PsyqError, match="limit must be >= 1, got 0"):
            await reader.export_jobs("q", None, 0)
    finally:
        await reader.close()


async def test_a_file_that_is_not_psyqs_is_named(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    reader = SqliteExport(f"sqlite:///{path}")
    with pytest.raises(PsyqError, match=r"other\.db has schema version 0"):
        await reader.open()
    await reader.close()
