"""add_flow writes a flow in a few batched statements; it must leave exactly what adding
its nodes one by one in pre-order leaves: the same ids, rows, links, events and records,
and on a refused flow, nothing.

Each case runs twice on fresh queues of one schema, once batched and once node by node
(`PostgresBackend.add_flow_node_by_node`), and the two outcomes, with queue names replaced
by placeholders, must be equal."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

import psyq
from psyq.backends.postgres.backend import PostgresBackend
from tests.conftest import fresh_name

from .conftest import url_for

Spec = Callable[[str, str], list[dict[str, Any]]]  # (queue a, queue b) -> flows
Setup = Callable[[psyq.Queue, psyq.Queue], Awaitable[None]]


def node(name: str, queue: str, *children: dict[str, Any], **opts: Any) -> dict[str, Any]:
    return {"name": name, "queue_name": queue, "data": {"n": name}, "opts": opts,
            "children": list(children)}  # fmt: skip


def parent_of(queue: str, job_id: str) -> dict[str, str]:
    return {"id": job_id, "queue": f"bull:{queue}"}


async def nothing(a: psyq.Queue, b: psyq.Queue) -> None:
    return None


async def stored_jobs(a: psyq.Queue, b: psyq.Queue) -> None:
    await a.add("stored", {"s": 1}, job_id="old")
    await b.add("stored-b", {"s": 2}, job_id="kept")


CASES: dict[str, tuple[Spec, Setup]] = {
    "children in another queue, grandchildren back in the first": (
        lambda a, b: [
            node("p1", a, node("c1", b, node("g1", a), node("g2", a)), node("c2", b)),
            node("p2", a, node("c3", b), node("c4", a, node("g3", b))),
        ],
        nothing,
    ),
    "custom ids repeated in the flow": (
        lambda a, b: [
            node("r", a, node("c", b, job_id="x"), node("auto", b), job_id="r"),
            node("r-again", a, node("under-twin", b), job_id="r"),
            node("y", b, node("under-y", b, job_id="y2"), job_id="y"),
            node("y2-again", b, node("under-y2", a), job_id="y2"),
            node("x-again", b, node("under-x", a), job_id="x"),
        ],
        nothing,
    ),
    "custom ids of stored jobs, with children": (
        lambda a, b: [
            node("dup", a, node("child", b), node("kept", b, node("gc", a)), job_id="old"),
            node("kept-leaf", b, job_id="kept"),
        ],
        stored_jobs,
    ),
    "a root under a stored parent, and one under an earlier root": (
        lambda a, b: [
            node("first", b, job_id="mine"),
            node("under-stored", a, node("c", b), parent=parent_of(a, "old")),
            node("under-first", a, parent=parent_of(b, "mine")),
        ],
        stored_jobs,
    ),
    "delays, priorities and lifo, on parents and leaves": (
        lambda a, b: [
            node("p", a, node("d", b, delay=5000), node("pr", b, priority=3), delay=100),
            node("l", b, node("lc", a, lifo=True), lifo=True, priority=2),
            node("leaf", a, lifo=True),
        ],
        nothing,
    ),
    "no flows": (lambda a, b: [], nothing),
    "only duplicates of stored jobs": (
        lambda a, b: [node("again", a, job_id="old"), node("again-b", b, job_id="kept")],
        stored_jobs,
    ),
    "refused: a root whose parent is missing, after a good tree": (
        lambda a, b: [
            node("good", a, node("c", b)),
            node("orphan", a, node("c", b), parent=parent_of(a, "nope")),
        ],
        nothing,
    ),
    "refused: a root whose parent comes later in the flow": (
        lambda a, b: [
            node("early", a, parent=parent_of(b, "late")),
            node("late", b, job_id="late"),
        ],
        nothing,
    ),
}


async def outcome(
    url: str, spec: Spec, setup: Setup, monkeypatch: pytest.MonkeyPatch, one_by_one: bool
) -> str:
    """What adding the flows left, as JSON text with the queue names replaced."""
    if one_by_one:
        monkeypatch.setattr(PostgresBackend, "add_flow", PostgresBackend.add_flow_node_by_node)
    names = [fresh_name("fa"), fresh_name("fb")]
    try:
        async with (
            psyq.Queue(names[0], connection=url) as a,
            psyq.Queue(names[1], connection=url) as b,
        ):
            await setup(a, b)
            async with psyq.FlowProducer(connection=url) as producer:
                found: dict[str, Any] = {"records": await added(producer, spec(*names))}
            found["store"] = await stored(a, names)
    finally:
        monkeypatch.undo()
    text = json.dumps(found, sort_keys=True, default=str)
    return text.replace(names[0], "<a>").replace(names[1], "<b>")


async def added(producer: psyq.FlowProducer, flows: list[dict[str, Any]]) -> Any:
    try:
        nodes = await producer.add_bulk(flows)
    except psyq.PsyqError as exc:
        return type(exc).__name__
    return [tree(n) for n in nodes]


def tree(n: psyq.JobNode) -> dict[str, Any]:
    job = n.job
    fields = {"id": job.id, "queue": job.queue_name, "name": job.name, "data": job.data,
              "opts": job.opts, "parent_key": job.parent_key, "delay": job.delay,
              "priority": job.priority, "progress": job.progress,
              "attempts_made": job.attempts_made, "stacktrace": repr(job.stacktrace),
              "returnvalue": job.returnvalue, "failed_reason": job.failed_reason}  # fmt: skip
    return {"job": fields, "children": [tree(c) for c in n.children]}


async def stored(queue: psyq.Queue, names: list[str]) -> dict[str, Any]:
    """The rows (in sequence order), links and events of both queues."""
    backend = queue._backend  # the test reads the tables directly
    assert isinstance(backend, PostgresBackend)
    qkeys = [f"bull:{name}" for name in names]
    async with backend.pool.acquire() as conn:
        return {
            "jobs": await rows(
                conn,
                "SELECT qkey, id, name, data, opts::text, delay, priority, parent_key, state,"
                " seq < 0 AS front, due IS NOT NULL AS due FROM jobs"
                " WHERE qkey = ANY($1) ORDER BY abs(seq)",
                qkeys,
            ),
            "deps": await rows(
                conn,
                "SELECT * FROM deps WHERE parent_qkey = ANY($1) ORDER BY parent_qkey, parent_id,"
                " child_key",
                qkeys,
            ),
            "events": await rows(
                conn,
                "SELECT qkey, event, job_id,"  # a delayed event's due time is a clock reading
                " CASE WHEN event = 'delayed' THEN '' ELSE fields::text END AS fields"
                " FROM events WHERE qkey = ANY($1) ORDER BY qkey, id",
                qkeys,
            ),
        }


async def rows(conn: asyncpg.Connection, sql: str, qkeys: list[str]) -> list[dict[str, Any]]:
    return [dict(row) for row in await conn.fetch(sql, qkeys)]


@pytest.mark.parametrize("case", list(CASES))
async def test_batched_flow_add_matches_adding_node_by_node(
    pg_server: str, fresh_schema: Callable[[], str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    url = url_for(pg_server, fresh_schema())
    spec, setup = CASES[case]
    batched = await outcome(url, spec, setup, monkeypatch, one_by_one=False)
    reference = await outcome(url, spec, setup, monkeypatch, one_by_one=True)
    assert batched == reference
    found = json.loads(batched)
    if case.startswith("refused"):
        assert isinstance(found["records"], str)
        assert found["store"] == {"jobs": [], "deps": [], "events": []}
    else:
        assert isinstance(found["records"], list)


async def test_a_flow_with_deduplication_is_added_node_by_node(
    pg_server: str, fresh_schema: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dedup check depends on what the nodes before it wrote: such flows take the
    node-by-node path, and a repeated dedup id inside one flow is deduplicated."""
    url = url_for(pg_server, fresh_schema())
    taken: list[int] = []
    by_node = PostgresBackend.add_flow_node_by_node

    async def spy(self: PostgresBackend, roots: Any) -> Any:
        taken.append(len(roots))
        return await by_node(self, roots)

    monkeypatch.setattr(PostgresBackend, "add_flow_node_by_node", spy)
    a, b = fresh_name("fa"), fresh_name("fb")
    once = {"deduplication": {"id": "once"}}
    async with psyq.FlowProducer(connection=url) as producer:
        [root] = await producer.add_bulk(
            [node("p", a, node("c1", b, **once), node("c2", b, **once), node("c3", b))]
        )
    assert taken == [1]
    first, second, third = (child.job.id for child in root.children)
    assert first == second != third
