"""Export / import between two schemas: every state, logs, flow links and queue metadata
arrive; a second import writes nothing; auto ids continue after the imported ones."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import ExportPage, JobRecord, NewJob
from psyq.backends.postgres import PostgresBackend
from tests.polling import eventually

from .conftest import url_for


async def export_all(backend: PostgresBackend, queue: str, size: int) -> list[Any]:
    pages, cursor = [], None
    while True:
        page = await backend.export_jobs(queue, cursor, size)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages


def summary(record: JobRecord) -> tuple[Any, ...]:
    state = "waiting" if record.state == "active" else record.state
    return (
        record.id,
        record.name,
        record.data,
        state,
        record.attempts_made,
        record.returnvalue,
        record.failed_reason,
        record.priority,
        record.delay,
        record.parent_key,
    )


async def test_a_queue_moves_between_schemas(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    source_url = url_for(pg_server, fresh_schema())
    target_url = url_for(pg_server, fresh_schema())
    name = "moving"
    async with psyq.Queue(name, connection=source_url) as queue:
        flow = psyq.FlowProducer(connection=source_url)
        node = await flow.add(
            {
                "name": "parent",
                "queue_name": name,
                "children": [{"name": "kid", "queue_name": name}],
            }
        )
        await flow.close()
        await queue.add_bulk([{"name": "plain", "data": i} for i in range(5)])
        await queue.add("later", None, delay=60_000)
        await queue.add("urgent", {"p": 1}, priority=3)
        logged = await queue.add("logged", None, job_id="with-logs")
        await logged.log("one")
        await logged.log("two")
        await queue.set_global_concurrency(3)
        await queue.upsert_job_scheduler("tick", {"every": 60_000}, {"name": "tick"})
        worker = psyq.Worker(name, connection=source_url)
        taken = await worker.get_next_job("tok", block=False)
        assert taken is not None
        await taken.move_to_completed({"ok": True}, "tok")
        await worker.close()
    source = PostgresBackend(source_url)
    target = PostgresBackend(target_url)
    await source.open()
    await target.open()
    try:
        pages = await export_all(source, name, 3)
        assert len(pages) >= 4
        written = [await target.import_jobs(name, page) for page in pages]
        assert [await target.import_jobs(name, page) for page in pages] == [0] * len(pages)
        await target.set_queue_meta(name, await source.get_queue_meta(name))
        exported = [job for page in pages for job in page.jobs]
        assert sum(written) == len(exported)
        for job in exported:
            copied = await target.get_job(name, job.id)
            assert copied is not None
            assert summary(copied) == summary(job)
        assert await target.get_job_logs(name, "with-logs", 0, -1, True) == (["one", "two"], 2)
        deps = await target.get_dependencies(name, node.job.id)
        assert deps == await source.get_dependencies(name, node.job.id)
        assert target.job_key(name, node.children[0].job.id) in deps["processed"]
        assert f"{name}:{node.children[0].job.id}" in deps["processed"]  # the layout's form
        meta = await target.get_queue_meta(name)
        assert meta["global_concurrency"] == 3
        assert list(meta["schedulers"]) == ["tick"]
        assert meta["schedulers"]["tick"]["every"] == 60_000
        assert await target.get_job_counts(name, ["completed"]) == {"completed": 1}
        [fresh] = await target.add_jobs(name, [NewJob("new", "null", {})])
        numeric = [int(job.id) for job in exported if job.id.isdigit()]
        assert int(fresh.id) > max(numeric)
    finally:
        await source.close()
        await target.close()


async def test_pages_keep_line_order_and_import_is_silent(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """Waiting in fetch order (lifo first), ids holding ':' across page boundaries, delayed
    by due time; the copy fetches in the same order and import writes no events."""
    url = url_for(pg_server, fresh_schema())
    backend = PostgresBackend(url)
    await backend.open()
    try:
        jobs = [NewJob("a", "1", {"jobId": "x:1"}), NewJob("b", "2", {"jobId": "x:2"})]
        jobs += [NewJob("c", "3", {"lifo": True}), NewJob("d", "4", {"delay": 90_000})]
        jobs += [NewJob("e", "5", {"delay": 30_000}), NewJob("f", "6", {"priority": 2})]
        await backend.add_jobs("src", jobs)
        pages = await export_all(backend, "src", 1)
        order = [job.name for page in pages for job in page.jobs]
        assert order == ["c", "a", "b", "f", "e", "d"]
        due = {k: v for page in pages for k, v in page.due.items()}
        assert sorted(due.values()) == list(due.values()) and len(due) == 2
        assert sum([await backend.import_jobs("dst", page) for page in pages]) == 6
        copied = await export_all(backend, "dst", 4)
        assert [job.name for page in copied for job in page.jobs] == order
        assert {k: v for page in copied for k, v in page.due.items()} == due
        assert await backend.read_events("dst", "0", 100, 0) == []
        with pytest.raises(psyq.PsyqError, match="cursor"):
            await backend.export_jobs("src", "pg1:99:0:0:x", 1)
    finally:
        await backend.close()


async def test_pages_order_finished_jobs_and_keep_rows_whose_times_are_missing(
    pg_server: str, fresh_schema: Callable[[], str], admin: Any
) -> None:
    """Each state is read from its own index from the cursor on; a row another client wrote
    without a due or finish time (key 0 in line order) is still exported, once."""
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    try:
        await backend.add_jobs("src", [NewJob(name, "null", {}) for name in "abcdefg"])
        finish = (
            "UPDATE {0}.job SET state = $1::text::{0}.job_state, finished_at_ms = $2 WHERE id = $3"
        )
        for name, state, at in [("b", "completed", 9), ("c", "completed", None)]:
            await admin.execute(finish.format(schema), state, at, str("abcdefg".index(name) + 1))
        for name, state, at in [("d", "failed", 3), ("e", "failed", 2), ("f", "completed", 4)]:
            await admin.execute(finish.format(schema), state, at, str("abcdefg".index(name) + 1))
        delay = "UPDATE {}.job SET state = 'delayed', process_at_ms = NULL WHERE id = '7'"
        await admin.execute(delay.format(schema))
        for size in (1, 2, 100):
            order = [
                job.name for page in await export_all(backend, "src", size) for job in page.jobs
            ]
            assert order == ["a", "g", "c", "f", "b", "e", "d"], size
    finally:
        await backend.close()


def record(job_id: str, name: str = "job") -> JobRecord:
    return JobRecord(id=job_id, queue="q", name=name, data="null", opts={}, timestamp=1)


async def test_import_keeps_the_logs_and_links_of_a_job_already_there(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """A job already there (skipped) keeps its own logs and links; a new one gets the
    page's."""
    backend = PostgresBackend(url_for(pg_server, fresh_schema()))
    await backend.open()
    try:
        kept = ExportPage([record("kept")], {"kept": ["old"]}, None, key_prefix="bull")
        kept.deps = {"kept": {"pending": ["bull:q:kid"]}}
        assert await backend.import_jobs("q", kept) == 1
        page = ExportPage([record("kept"), record("fresh")], {}, None)
        page.logs = {"kept": ["other"], "fresh": ["new"]}
        page.deps = {"fresh": {"pending": ["bull:q:kid2"]}, "kept": {"pending": ["bull:q:x"]}}
        assert await backend.import_jobs("q", page) == 1
        assert await backend.get_job_logs("q", "kept", 0, -1, True) == (["old"], 1)
        assert await backend.get_job_logs("q", "fresh", 0, -1, True) == (["new"], 1)
        # the pages name jobs as Redis does (`bull:`), the import as the layout does
        assert (await backend.get_dependencies("q", "kept"))["unprocessed"] == ["q:kid"]
        assert (await backend.get_dependencies("q", "fresh"))["unprocessed"] == ["q:kid2"]
    finally:
        await backend.close()


async def test_import_commits_asynchronously_and_the_meta_step_flushes_it(
    pg_server: str, fresh_schema: Callable[[], str], admin: Any
) -> None:
    """An import turns synchronous_commit off for its own transaction only (the pooled
    connection is back to the server's setting afterwards); set_queue_meta, the migration's
    last step, commits synchronously, so once it returns the WAL is flushed past every
    import before it."""
    backend = PostgresBackend(url_for(pg_server, fresh_schema(), pool_min="1", pool_max="1"))
    await backend.open()
    try:
        setting = await admin.fetchval("SHOW synchronous_commit")
        pages = [ExportPage([record(f"{p}-{i}") for i in range(50)], {}, None) for p in range(3)]
        inserted = []
        for page in pages:
            assert await backend.import_jobs("q", page) == 50
            inserted.append(await admin.fetchval("SELECT pg_current_wal_insert_lsn()"))
        async with backend.pool.acquire() as conn:
            assert await conn.fetchval("SHOW synchronous_commit") == setting
            assert await conn.fetchval("SHOW enable_seqscan") == "on"
        await backend.set_queue_meta("q", await backend.get_queue_meta("q"))
        flushed = await admin.fetchval("SELECT pg_current_wal_flush_lsn()")
        assert flushed >= max(inserted)
    finally:
        await backend.close()


async def test_wait_committed_flushes_the_imports_before_it(
    pg_server: str, fresh_schema: Callable[[], str], admin: Any
) -> None:
    """The live move marks a page moved only after B's wait_committed: on Postgres it is one
    synchronous commit, which returns once the WAL is on disk past every import before it
    (their asynchronous commits included)."""
    backend = PostgresBackend(url_for(pg_server, fresh_schema(), pool_min="1", pool_max="1"))
    await backend.open()
    try:
        page = ExportPage([record(f"w-{i}") for i in range(50)], {}, None)
        assert await backend.import_jobs("q", page) == 50
        inserted = await admin.fetchval("SELECT pg_current_wal_insert_lsn()")
        await backend.wait_committed()
        assert await admin.fetchval("SELECT pg_current_wal_flush_lsn()") >= inserted
    finally:
        await backend.close()


async def test_new_jobs_of_a_page_keep_its_order_around_taken_ids(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """The ids already there are skipped; the others get sequence numbers in page order."""
    backend = PostgresBackend(url_for(pg_server, fresh_schema()))
    await backend.open()
    try:
        ids = [f"j{i}" for i in (5, 3, 9, 1, 7, 2)]
        assert await backend.import_jobs("q", ExportPage([record("j9")], {}, None)) == 1
        page = ExportPage([record(job_id) for job_id in ids], {}, None)
        assert await backend.import_jobs("q", page) == 5
        [copied] = await export_all(backend, "q", 10)
        assert [job.id for job in copied.jobs] == ["j9", "j5", "j3", "j1", "j7", "j2"]
    finally:
        await backend.close()


async def test_a_different_job_under_a_taken_id_is_refused_with_nothing_written(
    pg_server: str, fresh_schema: Callable[[], str], admin: Any
) -> None:
    """A page meeting a taken id whose job differs is refused, naming the id, and none of
    its jobs are written; the same page with the same job there writes the new ones."""
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    try:
        assert await backend.import_jobs("q", ExportPage([record("a")], {}, None)) == 1
        changed = record("a")
        changed.data = '"changed"'
        with pytest.raises(psyq.PsyqError, match="job 'a' of queue 'q' exists with other"):
            await backend.import_jobs("q", ExportPage([record("d"), changed], {}, None))
        page = ExportPage([record("b"), record("a"), record("c")], {"c": ["c's log"]}, None)
        assert await backend.import_jobs("q", page) == 2
        query = "SELECT id FROM {}.job WHERE queue = 'q' ORDER BY seq"
        assert [row["id"] for row in await admin.fetch(query.format(schema))] == ["a", "b", "c"]
        assert await backend.get_job_logs("q", "c", 0, -1, True) == (["c's log"], 1)
    finally:
        await backend.close()


async def test_a_page_holding_an_id_twice_fails_whole(
    pg_server: str, fresh_schema: Callable[[], str], admin: Any
) -> None:
    """The same id twice in one page is refused as a psyq error naming it, and nothing of
    the page is written."""
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    try:
        page = ExportPage([record("a"), record("b"), record("a")], {}, None)
        with pytest.raises(psyq.PsyqError, match="job 'a' of queue 'q' is twice in the page"):
            await backend.import_jobs("q", page)
        assert await admin.fetchval(f"SELECT count(*) FROM {schema}.job") == 0
    finally:
        await backend.close()


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_flow_waiting_on_its_child_moves_to_a_prefixed_store_and_ends_there(
    pg_server: str, fresh_schema: Callable[[], str], store: str, tmp_path: Path
) -> None:
    """BullMQ's Postgres layout keeps a child's parent in columns, so its pages carry no
    `parent` option; the engine (memory://, sqlite:///) follows that option when a
    child ends. Imported there, the child's completion must still release its parent (it
    did not: the parent waited for its children for ever)."""
    source_url = url_for(pg_server, fresh_schema())
    target_url = f"sqlite:///{tmp_path}/moved.db" if store == "sqlite" else "memory://moved"
    name = "flowing"
    flow = psyq.FlowProducer(connection=source_url)
    try:
        kid = {"name": "kid", "queue_name": name}
        node = await flow.add({"name": "parent", "queue_name": name, "children": [kid]})
    finally:
        await flow.close()
    source = PostgresBackend(source_url)
    await source.open()
    try:
        pages = await export_all(source, name, 10)
    finally:
        await source.close()
    target = await open_backend(target_url)
    ran: list[str] = []

    async def run(job: psyq.Job) -> str:
        ran.append(job.name)
        return job.name

    try:
        for page in pages:
            await target.import_jobs(name, page)
        async with psyq.Queue(name, connection=target_url) as moved:
            worker = psyq.Worker(name, run, connection=target_url)
            try:

                async def parent_completed() -> bool:
                    return await moved.get_job_state(node.job.id) == "completed"

                await eventually(parent_completed, "the parent completed, after its children")
            finally:
                await worker.close()
    finally:
        await release_backend(target)
    assert ran == ["kid", "parent"]
