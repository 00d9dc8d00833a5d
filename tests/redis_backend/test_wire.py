"""The script connection of TCP redis:// URLs (psyq/backends/redis/wire.py): one
auto-pipelined connection, replies matched to callers in order, cancelled callers, lost
connections, databases other than 0."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

import psyq
from psyq.backends.redis.wire import wire_address


def test_only_plain_urls_take_the_lean_path() -> None:
    assert wire_address("redis://u:p@h:7/3") == {
        "host": "h",
        "port": 7,
        "db": 3,
        "username": "u",
        "password": "p",
        "ssl": None,
    }
    assert wire_address("redis://h:7/0?max_connections=4") is not None
    assert wire_address("rediss://h:7/0") is not None  # TLS: see test_wire_tls.py
    assert wire_address("unix:///tmp/redis.sock") is None
    assert wire_address("redis://h:7/0?socket_timeout=2") is None


async def test_many_tasks_share_the_connection_and_get_their_own_replies(
    queue: psyq.Queue,
) -> None:
    jobs = await asyncio.gather(*(queue.add("j", {"n": n}) for n in range(300)))
    fetched = await asyncio.gather(*(queue.get_job(job.id) for job in jobs))
    assert [job.data["n"] for job in fetched if job is not None] == list(range(300))


async def test_a_cancelled_caller_leaves_its_command_whole(queue: psyq.Queue) -> None:
    await queue.add("first")  # opens the connection
    call = asyncio.ensure_future(queue.add("cancelled"))
    await asyncio.sleep(0)  # the command is written...
    call.cancel()  # ...and its caller leaves before the reply
    with pytest.raises(asyncio.CancelledError):
        await call
    after = await queue.add("after")  # the next reply is this caller's own
    assert after.name == "after"
    assert await queue.count() == 3


async def test_a_killed_connection_fails_its_callers_then_reconnects(
    queue: psyq.Queue, raw: Any
) -> None:
    await queue.add("before")
    # only the script connection of this backend (the server may be shared)
    transport = queue._backend._wire._wire._transport  # type: ignore[union-attr]
    host, port = transport.get_extra_info("sockname")[:2]
    assert await raw.client_kill_filter(addr=f"{host}:{port}") == 1
    outcome: Any
    try:
        outcome = await queue.add("maybe")
    except psyq.ConnectionError as exc:  # the kill reached the connection before the call
        outcome = exc
    assert isinstance(outcome, psyq.Job | psyq.ConnectionError)
    job = await queue.add("after")  # a fresh connection
    assert await queue.get_job_state(job.id) == "waiting"


async def test_a_database_other_than_0(url: str, queue_name: str) -> None:
    other = url.rsplit("/", 1)[0] + "/3"
    async with psyq.Queue(queue_name, connection=other) as queue:
        job = await queue.add("in-db-3")
    client = Redis.from_url(other, decode_responses=True)
    try:
        assert await client.hget(f"bull:{queue_name}:{job.id}", "name") == "in-db-3"
        assert await client.delete(f"bull:{queue_name}:{job.id}") == 1
    finally:
        await client.aclose()
