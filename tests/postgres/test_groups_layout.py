"""Grouped jobs in BullMQ 6's Postgres layout (sql/groups.sql): a grouped waiting job sits in
its group's line, outside what the layout's own take reads, so a Node BullMQ (open source)
worker on the same queue, whose take is the layout's move_to_active, never takes it; psyq's
take does, and an emptied group leaves no row behind."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import asyncpg

from psyq.backends.base import Completed, FetchRequest, GroupLimits, Limiter, NewJob
from psyq.backends.postgres import PostgresBackend
from tests.polling import eventually

from .conftest import url_for


def request(n: int = 1) -> FetchRequest:
    return FetchRequest([uuid.uuid4().hex for _ in range(n)], 30_000, "w", None)


def grouped(name: str, group: str) -> NewJob:
    return NewJob(name, "{}", {"group": {"id": group}})


async def test_the_layouts_own_take_never_returns_a_grouped_job(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    try:
        await backend.add_jobs("q", [grouped("g1", "a"), grouped("g2", "b")])
        await admin.execute(f'SET search_path TO "{schema}"')
        # what Node BullMQ's worker runs: the layout's move_to_active, no group path
        node_take = await admin.fetch(
            "SELECT * FROM move_to_active('q', 'node-token', 30000,"
            " (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 'node', NULL, NULL)"
        )
        assert node_take == []
        rows = await admin.fetch("SELECT state::text, process_at_ms FROM job WHERE queue = 'q'")
        assert [(r["state"], r["process_at_ms"]) for r in rows] == [("delayed", None)] * 2
        assert await backend.get_state("q", "1") == "waiting"
        taken = await backend.move_to_active("q", request(5))
        assert sorted(job.name for job in taken) == ["g1", "g2"]
        for job in taken:
            assert job.lock_token is not None
            await backend.move_to_finished("q", job.id, job.lock_token, Completed("1", None))
        assert await admin.fetchval("SELECT count(*) FROM psyq_group WHERE queue = 'q'") == 0
    finally:
        await backend.close()


async def test_a_job_the_layout_puts_back_to_waiting_goes_to_its_groups_line(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    try:
        [job] = await backend.add_jobs("q", [grouped("g1", "a")])
        [taken] = await backend.move_to_active("q", request())
        assert taken.lock_token is not None
        await admin.execute(f'SET search_path TO "{schema}"')
        # the layout's hand-back, as a Node client would call it
        await admin.execute(
            "SELECT move_active_to_wait('q', $1, $2,"
            " (extract(epoch FROM clock_timestamp()) * 1000)::bigint)",
            job.id,
            taken.lock_token,
        )
        state = await admin.fetchval("SELECT state::text FROM job WHERE queue = 'q'")
        assert state == "delayed"  # in the line, not in the layout's waiting jobs
        assert [r.name for r in await backend.get_group_jobs("q", "a", 0, -1)] == ["g1"]
        opts = json.loads(await admin.fetchval("SELECT opts::text FROM job WHERE queue = 'q'"))
        assert opts["group"] == {"id": "a"}
    finally:
        await backend.close()


async def test_drain_clean_and_obliterate_take_the_groups_lines_with_them(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    await admin.execute(f'SET search_path TO "{schema}"')
    late = NewJob("late", "{}", {"delay": 60_000})
    try:
        await backend.add_jobs("q", [grouped("g1", "a"), grouped("g2", "b"), late])
        assert await backend.clean("q", 0, 0, "delayed") == ["3"]  # not the grouped ones
        assert await backend.get_groups_job_count("q") == 2
        assert sorted(await backend.clean("q", 0, 0, "wait")) == ["1", "2"]
        assert await backend.get_groups_job_count("q") == 0
        await backend.add_jobs("q", [grouped("g3", "a"), late])
        await backend.drain("q", False)
        assert await backend.get_groups_job_count("q") == 0
        assert (await backend.get_job_counts("q", ["delayed"]))["delayed"] == 1
        await backend.set_group_concurrency("q", "a", 2)
        await backend.add_jobs("q", [grouped("g4", "a")])
        assert await admin.fetchval("SELECT count(*) FROM psyq_group WHERE queue = 'q'") == 1
        await backend.obliterate("q", True)
        assert await admin.fetchval("SELECT count(*) FROM psyq_group WHERE queue = 'q'") == 0
        assert await admin.fetchval("SELECT count(*) FROM job WHERE queue = 'q'") == 0
    finally:
        await backend.close()


async def test_the_queues_own_limits_hold_for_grouped_jobs_too(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = PostgresBackend(url_for(pg_server, fresh_schema()))
    await backend.open()
    try:
        await backend.add_jobs("q", [grouped(f"g{n}", f"t{n}") for n in range(4)])
        await backend.pause("q")
        assert await backend.move_to_active("q", request(4)) == []
        await backend.resume("q")
        await backend.set_global_concurrency("q", 1)
        assert len(await backend.move_to_active("q", request(4))) == 1  # one slot
        await backend.set_global_concurrency("q", None)
        limited = FetchRequest(
            [uuid.uuid4().hex for _ in range(4)], 30_000, "w", Limiter(2, 60_000)
        )
        assert len(await backend.move_to_active("q", limited)) == 2  # the worker's limiter
    finally:
        await backend.close()


async def test_an_emptied_groups_row_goes_once_its_rate_window_ends(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    await admin.execute(f'SET search_path TO "{schema}"')
    limits = GroupLimits(None, Limiter(1, 2_000))  # long: the host may be slow
    try:
        await backend.add_jobs("q", [grouped("g1", "a")])
        fetch = FetchRequest([uuid.uuid4().hex], 30_000, "w", None, group=limits)
        [job] = await backend.move_to_active("q", fetch)
        assert job.lock_token is not None
        await backend.move_to_finished("q", job.id, job.lock_token, Completed("1", None))
        count = "SELECT count(*) FROM psyq_group WHERE queue = 'q'"
        assert await admin.fetchval(count) == 1  # kept: its window still holds
        await backend.add_jobs("q", [grouped("g2", "a")])
        again = FetchRequest([uuid.uuid4().hex], 30_000, "w", None, group=limits)
        assert await backend.move_to_active("q", again) == []  # the window holds
        await eventually(lambda: backend.move_to_active("q", again), "g2 taken", 10)
        [g2] = await backend.get_jobs("q", ["active"], 0, -1, True)
        assert g2.lock_token is not None
        await backend.move_to_finished("q", g2.id, g2.lock_token, Completed("1", None))

        async def swept() -> bool:
            await backend.move_stalled_jobs_to_wait("q", 1, 30_000)
            return bool(await admin.fetchval(count) == 0)

        await eventually(swept, "the row swept once its window ended", 10)
    finally:
        await backend.close()


async def test_a_clean_that_leaves_some_of_a_groups_jobs_leaves_them_in_its_rotation(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = PostgresBackend(url_for(pg_server, fresh_schema()))
    await backend.open()
    try:
        await backend.add_jobs("q", [grouped(f"g{n}", "a") for n in range(3)])
        assert await backend.clean("q", 0, 1, "wait") == ["1"]
        assert [g["id"] for g in await backend.get_groups("q", 0, -1)] == ["a"]
        taken = await backend.move_to_active("q", request(5))
        assert [job.name for job in taken] == ["g1", "g2"]
    finally:
        await backend.close()


async def test_one_take_for_many_slots_serves_the_groups_round_robin_in_token_order(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = PostgresBackend(url_for(pg_server, fresh_schema()))
    await backend.open()
    try:
        jobs = [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"), ("b2", "b"), ("c1", "c")]
        await backend.add_jobs("q", [grouped(name, group) for name, group in jobs])
        fetch = request(8)
        taken = await backend.move_to_active("q", fetch)
        assert [job.name for job in taken] == ["a1", "b1", "c1", "a2", "b2", "a3"]
        assert [job.lock_token for job in taken] == fetch.tokens[:6]
        limited = GroupLimits(2, None)  # the worker's group concurrency: 2 active each
        await backend.add_jobs("q", [grouped(f"a{n}", "a") for n in range(4, 7)])
        more = FetchRequest([uuid.uuid4().hex for _ in range(4)], 30_000, "w", None, group=limited)
        assert await backend.move_to_active("q", more) == []  # a has 3 active already
    finally:
        await backend.close()
