"""The worker registry forgets workers that died: an entry lives `worker_ttl` seconds past
its last renewal, and a running worker's backend renews it every third of that."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import asyncpg
import pytest

import psyq
from tests.conftest import fresh_name
from tests.polling import eventually

from .conftest import url_for

WORKER_SCRIPT = """
import asyncio, sys
import psyq

async def main(url, name):
    worker = psyq.Worker(name, lambda job: None, connection=url, worker_name="doomed")
    await asyncio.Event().wait()  # runs until killed

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def _names(queue: psyq.Queue) -> set[str]:
    return {worker["name"] for worker in await queue.get_workers()}


async def _wait_until(check: Callable[[set[str]], bool], queue: psyq.Queue, what: str) -> None:
    async def listed() -> bool:
        return check(await _names(queue))

    await eventually(listed, what, 30)


@pytest.mark.timeout(60)
async def test_a_dead_worker_expires_and_a_live_one_stays(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    url = url_for(pg_server, fresh_schema(), worker_ttl="1")
    name = fresh_name("registry")
    async with psyq.Queue(name, connection=url) as queue:
        live = psyq.Worker(name, lambda job: None, connection=url, worker_name="alive")
        try:
            await _wait_until(lambda names: "alive" in names, queue, "the live worker is listed")
            doomed = subprocess.Popen(
                [sys.executable, "-c", WORKER_SCRIPT, url, name],
                cwd=os.getcwd(),
            )
            try:
                await _wait_until(lambda n: "doomed" in n, queue, "the other worker is listed")
            finally:
                doomed.send_signal(signal.SIGKILL)  # it dies without unregistering
                doomed.wait()
            await _wait_until(lambda n: "doomed" not in n, queue, "the dead worker expires")
            # The live worker registered before the dead one's last renewal, so its first
            # entry has expired too: only its renewals keep it listed.
            assert "alive" in await _names(queue)
        finally:
            await live.close()
        assert await _names(queue) == set()


async def test_node_bullmqs_workers_are_listed_after_psyqs(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    """Node BullMQ 6 names each worker's LISTEN connection `<queue>` or `<queue>:w:<name>`
    (application_name) and lists workers by it; psyq lists them so too (as on Redis), and
    not another queue's whose name only starts alike."""
    url = url_for(pg_server, fresh_schema())
    name = fresh_name("registry")
    names = [name, f"{name}:w:billing", f"{name}-other", f"{name}:x"]
    nodeish = [
        await asyncpg.connect(pg_server, server_settings={"application_name": one}) for one in names
    ]
    try:
        async with psyq.Queue(name, connection=url) as queue:
            worker = psyq.Worker(name, lambda job: None, connection=url, worker_name="ours")
            try:
                await _wait_until(lambda n: "ours" in n, queue, "psyq's worker is listed")
                listed = await queue.get_workers()
            finally:
                await worker.close()
            assert [entry["name"] for entry in listed] == ["ours", *names[:2]]
            assert all(entry["started"] > 0 and entry["addr"] for entry in listed[1:])
    finally:
        for conn in nodeish:
            await conn.close()


async def _sessions(admin: asyncpg.Connection, name: str) -> list[int]:
    """The pids of the sessions named `name` (application_name) in this database."""
    rows = await admin.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = $1",
        name,
    )
    return [row["pid"] for row in rows]


async def _wait_sessions(
    admin: asyncpg.Connection, name: str, count: int, gone: int | None = None
) -> list[int]:
    """The pids of the sessions named `name` once there are `count` (and `gone` is not one)."""

    async def counted() -> list[list[int]]:
        pids = await _sessions(admin, name)
        return [pids] if len(pids) == count and gone not in pids else []

    what = f"{count} sessions named {name!r} without {gone}"
    return (await eventually(counted, what, 20))[0]


@pytest.mark.timeout(60)
async def test_each_worker_holds_a_session_node_lists_workers_by(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    """Node BullMQ's getWorkers counts the sessions named `<queue>` or `<queue>:w:<name>`:
    each running psyq worker holds one (`<queue>:w:psyq`) from its start to its close, and
    opens it again when it is lost; psyq's own list shows each worker once."""
    url = url_for(pg_server, fresh_schema())
    name = fresh_name("presence")
    session = f"{name}:w:psyq"
    async with psyq.Queue(name, connection=url) as queue:
        first = psyq.Worker(name, lambda job: None, connection=url, worker_name="first")
        second = psyq.Worker(name, lambda job: None, connection=url, worker_name="second")
        try:
            await _wait_until(lambda n: n == {"first", "second"}, queue, "both are listed")
            pids = await _wait_sessions(admin, session, 2)
            assert sorted(w["name"] for w in await queue.get_workers()) == ["first", "second"]
            await admin.execute("SELECT pg_terminate_backend($1)", pids[0])
            again = await _wait_sessions(admin, session, 2, gone=pids[0])
            assert pids[1] in again
        finally:
            await second.close()
        await _wait_sessions(admin, session, 1)
        await first.close()
        await _wait_sessions(admin, session, 0)


async def test_announce_workers_false_opens_no_session(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    url = url_for(pg_server, fresh_schema(), announce_workers="false")
    name = fresh_name("presence")
    async with psyq.Queue(name, connection=url) as queue:
        worker = psyq.Worker(name, lambda job: None, connection=url, worker_name="quiet")
        try:
            await _wait_until(lambda n: "quiet" in n, queue, "the worker is listed")
            assert await _sessions(admin, f"{name}:w:psyq") == []
        finally:
            await worker.close()


async def test_a_long_queue_names_workers_are_listed_once(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    """Postgres keeps 63 bytes of an application_name: the session of a worker of a queue
    named in 58 bytes is `<queue>:w:ps`, which Node lists; psyq still lists it once."""
    url = url_for(pg_server, fresh_schema())
    name = fresh_name("presence").ljust(58, "x")
    async with psyq.Queue(name, connection=url) as queue:
        worker = psyq.Worker(name, lambda job: None, connection=url, worker_name="long")
        try:
            await _wait_sessions(admin, f"{name}:w:ps", 1)
            assert [entry["name"] for entry in await queue.get_workers()] == ["long"]
        finally:
            await worker.close()


@pytest.mark.timeout(60)
async def test_a_running_queue_events_holds_a_session_node_lists_it_by(
    pg_server: str,
    fresh_schema: Callable[[], str],
    admin: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Node BullMQ's getQueueEvents counts the sessions named `<queue>:qe`: a running psyq
    QueueEvents is one from its first read; the session goes when its backend closes, or,
    on a shared backend, once no read of the queue has been under way for a while."""
    from psyq.backends.postgres import PostgresBackend, events

    monkeypatch.setattr(events, "READER_LINGER_S", 0.2)
    url = url_for(pg_server, fresh_schema())
    name = fresh_name("presence")
    session = f"{name}:qe"
    own = psyq.QueueEvents(name, connection=url, blocking_timeout=100)
    await own.wait_until_ready(10)
    [pid] = await _wait_sessions(admin, session, 1)
    await admin.execute("SELECT pg_terminate_backend($1)", pid)  # lost: opened again
    await _wait_sessions(admin, session, 1, gone=pid)
    await own.close()
    await _wait_sessions(admin, session, 0)

    shared = PostgresBackend(url)
    await shared.open()
    try:
        reader = psyq.QueueEvents(name, connection=shared, blocking_timeout=100)
        await reader.wait_until_ready(10)
        await _wait_sessions(admin, session, 1)
        await reader.close()  # the backend stays open: the session ends after the linger
        await _wait_sessions(admin, session, 0)
        assert await _sessions(admin, f"{name}:w:psyq") == []  # not a worker
    finally:
        await shared.close()


async def test_announce_workers_false_announces_no_queue_events(
    pg_server: str, fresh_schema: Callable[[], str], admin: asyncpg.Connection
) -> None:
    url = url_for(pg_server, fresh_schema(), announce_workers="false")
    name = fresh_name("presence")
    async with psyq.Queue(name, connection=url) as queue:
        reader = psyq.QueueEvents(name, connection=url, blocking_timeout=100)
        heard = asyncio.Event()
        reader.on("added", lambda args, event_id: heard.set())
        try:
            await reader.wait_until_ready(10)
            await queue.add("x", {})
            await asyncio.wait_for(heard.wait(), 10)  # it has read
            assert await _sessions(admin, f"{name}:qe") == []
        finally:
            await reader.close()
