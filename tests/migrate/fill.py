"""A source holding every state, a flow across two queues, a scheduler, logs, a deduplication
key and a paused queue; and helpers that read a backend back for comparison."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import Completed, ExportPage, Failed, FetchRequest, JobRecord
from psyq.backends.keys import rekey_page
from psyq_migrate.reading import export_pages
from psyq_migrate.verify import compared_state
from tests.conftest import fresh_name

LONG_LOCK = 600_000  # the active job keeps its lock for the whole test


async def fill_every_state(url: str) -> list[str]:
    """Two fresh queues on `url`; returns their names (main first)."""
    main, side = fresh_name("main"), fresh_name("side")
    async with psyq.Queue(main, connection=url) as queue:
        for name in ("done", "broken", "busy"):
            await queue.add(name, {"n": name})
        await settle_three(url, main)
        await queue.add("w1", {"i": 1})
        await queue.add("w2", {"i": 2}, job_id="custom-id")
        await queue.add("urgent", None, priority=3)
        await queue.add("later", {"x": [1, 2]}, delay=60_000)
        await queue.add("once", {"d": 1}, deduplication={"id": "dedup-1"})
        await queue.upsert_job_scheduler("tick", {"every": 60_000}, {"name": "tick"})
        async with psyq.FlowProducer(connection=url) as producer:
            await producer.add(
                {
                    "name": "parent",
                    "queue_name": main,
                    "children": [{"name": "kid", "queue_name": side}],
                }
            )
    async with psyq.Queue(side, connection=url) as other:
        await other.add_bulk([{"name": "bulk", "data": {"i": i}} for i in range(5)])
        await other.pause()
    return [main, side]


async def settle_three(url: str, queue: str) -> None:
    """Take the three first jobs: complete one (with a log), fail one, keep one active."""
    backend = await open_backend(url)
    try:
        request = FetchRequest(tokens=["t1", "t2", "t3"], lock_duration=LONG_LOCK)
        done, broken, _busy = await backend.move_to_active(queue, request)
        await backend.add_log(queue, done.id, "first row", None)
        await backend.add_log(queue, done.id, "second row", None)
        await backend.move_to_finished(queue, done.id, "t1", Completed('{"ok": 1}'))
        await backend.move_to_finished(queue, broken.id, "t2", Failed("boom", ["at line 1"]))
    finally:
        await release_backend(backend)


async def read_queue(url: str, queue: str, queues: Sequence[str] = ()) -> dict[str, Any]:
    """Everything migration moves of one queue, in a comparable form: jobs (fields, state as
    compared, order within each state), logs, due times, flow links, and queue meta. Job
    keys (parent keys, links) must be in the store's own form (`<prefix>:<queue>:<id>`, or
    `<queue>:<id>` on Postgres) and name one of `queues`; they are compared without a
    prefix."""
    backend = await open_backend(url)
    known = {queue, *queues}

    def own(key: str) -> None:
        name, job_id = backend.split_job_key(key)
        assert name in known and job_id and backend.job_key(name, job_id) == key, key

    try:
        jobs: dict[str, dict[str, Any]] = {}
        order: dict[str, list[str]] = {}
        logs: dict[str, list[str]] = {}
        due: dict[str, int] = {}
        deps: dict[str, Any] = {}
        async for exported in export_pages(backend, queue, 4):
            assert exported.key_prefix == backend.key_prefix
            for key in job_keys(exported):
                own(key)
            page = rekey_page(exported, None)
            for record in page.jobs:
                fields = compared_fields(record)
                jobs[record.id] = fields
                order.setdefault(fields["state"], []).append(record.id)
            logs.update(page.logs)
            due.update(page.due)
            deps.update(page.deps)
        meta = await backend.get_queue_meta(queue)
        return {"jobs": jobs, "order": order, "logs": logs, "due": due, "deps": deps, "meta": meta}
    finally:
        await release_backend(backend)


def job_keys(page: ExportPage) -> list[str]:
    """The job keys an exported page holds: its jobs' parents and its flow links."""
    keys = [record.parent_key for record in page.jobs if record.parent_key]
    keys += [key for links in page.deps.values() for kind in links.values() for key in kind]
    return keys


def compared_fields(record: JobRecord) -> dict[str, Any]:
    """A record's fields as read_queue compares them across stores."""
    fields = asdict(record)
    fields["state"] = compared_state(record.state)
    fields["stacktrace"] = list(record.stacktrace)
    # JSON text compared as values: Postgres keeps data and return values as jsonb, which
    # has its own spacing and key order
    for text in ("data", "returnvalue"):
        if isinstance(fields[text], str):
            fields[text] = json.loads(fields[text])
    for volatile in ("lock_token", "queue"):
        fields.pop(volatile)
    return fields


def read_queues(url: str, queues: list[str]) -> dict[str, dict[str, Any]]:
    async def read_all() -> dict[str, dict[str, Any]]:
        return {queue: await read_queue(url, queue, queues) for queue in queues}

    return asyncio.run(read_all())


def state_counts(snapshot: dict[str, Any]) -> dict[str, int]:
    return {state: len(ids) for state, ids in snapshot["order"].items()}
