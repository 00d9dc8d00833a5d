"""Export / import / queue meta: what `psyq migrate` moves between backends, on one backend.

A queue holding every state is exported page by page and imported under another name; the
copy must hold the same jobs in the same states (active ones as waiting), in the same order,
with their due times, logs and flow links, and new ids must not collide with moved ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import BackendAdapter, ExportPage
from psyq.backends.keys import convert_key, rekey_page
from tests.conftest import fresh_name

from .conftest import WorkerFactory, skip_if_unsupported

STATES = ["waiting", "prioritized", "delayed", "active", "completed", "failed", "waiting-children"]


@pytest.fixture
async def backend(backend_url: str) -> AsyncIterator[BackendAdapter]:
    adapter = await open_backend(backend_url)
    try:
        yield adapter
    finally:
        await release_backend(adapter)


async def fill_every_state(
    queue: psyq.Queue, make_worker: WorkerFactory, backend_url: str
) -> dict[str, Any]:
    """A queue with jobs in every state; returns what the test checks afterwards."""
    for name in ("done", "broken", "busy"):
        await queue.add(name, {"n": name})
    worker = make_worker(None)
    done = await worker.get_next_job("t1")
    broken = await worker.get_next_job("t2")
    busy = await worker.get_next_job("t3")
    assert done and broken and busy
    await done.log("a log row")
    await done.move_to_completed({"ok": 1}, "t1")
    await broken.move_to_failed(RuntimeError("boom"), "t2")
    first = await queue.add("w1", {"i": 1})
    second = await queue.add("w2", {"i": 2})
    urgent = await queue.add("p", None, priority=3)
    later = await queue.add("d", None, delay=60_000)
    async with psyq.FlowProducer(connection=backend_url) as producer:
        flow = await producer.add(
            {
                "name": "parent",
                "queue_name": queue.name,
                "children": [
                    {"name": "child", "queue_name": queue.name, "opts": {"delay": 10_000_000}}
                ],
            }
        )
    return {
        "waiting_order": [first.id, second.id],
        "busy": busy.id,
        "done": done.id,
        "urgent": urgent.id,
        "later": later.id,
        "parent": flow.job.id,
        "child": flow.children[0].job.id,
    }


async def export_all(backend: BackendAdapter, queue: str, limit: int) -> list[ExportPage]:
    pages = [await skip_if_unsupported(backend.export_jobs(queue, None, limit), "export")]
    while pages[-1].next_cursor is not None:
        pages.append(await backend.export_jobs(queue, pages[-1].next_cursor, limit))
    return pages


async def copy_queue(backend: BackendAdapter, source: str, target: str, limit: int = 3) -> int:
    written = 0
    for page in await export_all(backend, source, limit):
        written += await skip_if_unsupported(backend.import_jobs(target, page), "import")
    meta = await skip_if_unsupported(backend.get_queue_meta(source), "queue metadata")
    await backend.set_queue_meta(target, meta)
    return written


async def test_every_state_survives_an_export_and_import(
    queue: psyq.Queue, make_worker: WorkerFactory, backend: BackendAdapter, backend_url: str
) -> None:
    seen = await fill_every_state(queue, make_worker, backend_url)
    target_name = fresh_name()
    written = await copy_queue(backend, queue.name, target_name)
    assert written == 9
    async with psyq.Queue(target_name, connection=backend_url) as target:
        counts = await target.get_job_counts(*STATES)
        assert counts == {
            "waiting": 3,  # two waiting, and the active job comes back as waiting
            "prioritized": 1,
            "delayed": 2,
            "active": 0,
            "completed": 1,
            "failed": 1,
            "waiting-children": 1,
        }
        waiting = [job.id for job in await target.get_jobs(["waiting"], asc=True)]
        assert waiting[:2] == seen["waiting_order"] and seen["busy"] in waiting
        await assert_same_job(queue, target, seen["done"])
        await assert_same_job(queue, target, seen["later"])
        await assert_same_job(queue, target, seen["urgent"])
        logs = await target.get_job_logs(seen["done"])
        assert logs["logs"] == ["a log row"]
        parent = await target.get_job(seen["parent"])
        assert parent is not None
        deps = await parent.get_dependencies()  # links are kept, queue included
        assert deps["unprocessed"] == [backend.job_key(queue.name, seen["child"])]
        fresh = await target.add("new")
        assert int(fresh.id) > max(int(i) for i in waiting if i.isdigit())


async def assert_same_job(source: psyq.Queue, target: psyq.Queue, job_id: str) -> None:
    before, after = await source.get_job(job_id), await target.get_job(job_id)
    assert before is not None and after is not None
    fields: tuple[str, ...] = ("name", "data", "opts", "timestamp", "delay", "priority")
    fields += ("attempts_made", "finished_on", "returnvalue", "failed_reason")
    assert {f: getattr(after, f) for f in fields} == {f: getattr(before, f) for f in fields}
    assert await after.get_state() == await before.get_state()


async def test_a_second_import_writes_nothing(queue: psyq.Queue, backend: BackendAdapter) -> None:
    for i in range(5):
        await queue.add("x", {"i": i})
    target = fresh_name()
    assert await copy_queue(backend, queue.name, target, limit=2) == 5
    assert await copy_queue(backend, queue.name, target, limit=2) == 0
    counts = await backend.get_job_counts(target, ["waiting"])
    assert counts == {"waiting": 5}


async def test_a_different_job_under_the_same_id_is_refused_unless_overwrite(
    queue: psyq.Queue, backend: BackendAdapter, backend_url: str
) -> None:
    await queue.add("original", {"v": 1}, job_id="same")
    await queue.add("other", {"v": 2}, job_id="other")
    target = fresh_name()
    async with psyq.Queue(target, connection=backend_url) as copy:
        await copy.add("impostor", {"v": 9}, job_id="same")
        [page] = await export_all(backend, queue.name, 10)
        with pytest.raises(psyq.PsyqError, match="same"):
            await backend.import_jobs(target, page)
        assert await copy.get_job("other") is None  # nothing of the page was written
        assert await backend.import_jobs(target, page, overwrite=True) == 2
        replaced = await copy.get_job("same")
        assert replaced is not None and replaced.name == "original"


async def test_queue_meta_moves_paused_state_and_schedulers(
    queue: psyq.Queue, backend: BackendAdapter, backend_url: str
) -> None:
    await queue.upsert_job_scheduler("tick", {"every": 60_000}, {"name": "tick"})
    await queue.pause()
    target = fresh_name()
    await copy_queue(backend, queue.name, target)
    async with psyq.Queue(target, connection=backend_url) as copy:
        assert await copy.is_paused()
        scheduler = await copy.get_job_scheduler("tick")
        assert scheduler is not None and scheduler["every"] == 60_000
        assert await copy.get_job_counts(*STATES, "paused") == await queue.get_job_counts(
            *STATES, "paused"
        )
        assert sum((await copy.get_job_counts(*STATES, "paused")).values()) == 1  # its next run


async def test_an_expired_cursor_is_refused(queue: psyq.Queue, backend: BackendAdapter) -> None:
    await queue.add("x")
    await skip_if_unsupported(backend.export_jobs(queue.name, None, 1), "export")
    with pytest.raises(psyq.PsyqError, match="cursor"):
        await backend.export_jobs(queue.name, "no-such-cursor:5", 1)


async def test_an_import_writes_job_keys_in_the_stores_own_form(
    queue: psyq.Queue, make_worker: WorkerFactory, backend: BackendAdapter, backend_url: str
) -> None:
    """A page exported by a store of the other key form (Redis `bull:<queue>:<id>`, BullMQ's
    Postgres layout `<queue>:<id>`) arrives with its parent key and links in this store's."""
    seen = await fill_every_state(queue, make_worker, backend_url)
    other = "bull" if backend.key_prefix is None else None
    target_name = fresh_name()
    for page in await export_all(backend, queue.name, 3):
        assert page.key_prefix == backend.key_prefix
        foreign = rekey_page(page, other)
        for job in foreign.jobs:
            if job.parent_key:
                assert job.parent_key == convert_key(
                    backend.job_key(queue.name, seen["parent"]), backend.key_prefix, other
                )
        await backend.import_jobs(target_name, foreign)
    async with psyq.Queue(target_name, connection=backend_url) as target:
        child = await target.get_job(seen["child"])
        assert child is not None
        assert child.parent_key == backend.job_key(queue.name, seen["parent"])
        parent = await target.get_job(seen["parent"])
        assert parent is not None
        deps = await parent.get_dependencies()
        assert deps["unprocessed"] == [backend.job_key(queue.name, seen["child"])]
