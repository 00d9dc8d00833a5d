"""The lean wire of script calls (psyq/backends/redis/wire.py, cluster_wire.py): the calls
of one event-loop turn leave in one socket write (per node on a cluster), each caller gets
its own reply, and on a cluster a slot migrated by hand while calls run (CLUSTER SETSLOT,
MIGRATE) is followed through ASK, TRYAGAIN and MOVED, no call lost or run twice."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis import Redis
from redis.crc import key_slot

import psyq
from psyq.backends.redis import RedisBackend
from psyq.backends.redis.cluster_wire import ClusterWire
from psyq.backends.redis.scripts import Script, pack_command
from psyq.backends.redis.wire import EXEC, MULTI
from tests.polling import eventually

SOURCE = "return ARGV[2]"  # ARGV[1] is the queue prefix; the call's own argument back
ECHO = Script("echo", (), SOURCE, hashlib.sha1(SOURCE.encode()).hexdigest())
CALLS = 60


def tagged(name: str = "q") -> str:
    return f"{{{uuid.uuid4().hex[:12]}}}{name}"


@pytest.fixture
async def plain(url: str) -> AsyncIterator[RedisBackend]:
    backend = RedisBackend(url)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
def cluster_url(redis_cluster: Any) -> str:
    url: str = redis_cluster()
    return url


@pytest.fixture
async def clustered(cluster_url: str) -> AsyncIterator[RedisBackend]:
    backend = RedisBackend(cluster_url)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


async def echo_all(backend: RedisBackend, keys: list[str]) -> list[Any]:
    wire: Any = backend._wire
    calls = [wire.call(ECHO, key, (f"{key}/{n}",)) for n, key in enumerate(keys)]
    return list(await asyncio.gather(*calls))


async def test_a_turns_first_call_leaves_at_once_and_the_rest_in_one_write(
    plain: RedisBackend,
) -> None:
    wire: Any = plain._wire
    await echo_all(plain, ["bull:w"])  # connects, loads the script
    before = wire.writes
    keys = ["bull:w"] * CALLS
    assert await echo_all(plain, keys) == [f"bull:w/{n}" for n in range(CALLS)]
    assert wire.writes - before == 2
    connection = wire.connected
    lone = connection.writes
    reply = connection.send(pack_command("PING"))
    assert connection.writes - lone == 1  # written before the caller yields to the loop
    assert await reply == "PONG"


async def test_a_cluster_writes_once_per_node_per_turn(clustered: RedisBackend) -> None:
    wire = clustered._wire
    assert isinstance(wire, ClusterWire)
    keys = [f"bull:{tagged()}" for _ in range(12)]  # queues over every primary
    await echo_all(clustered, keys)
    nodes = {wire.primary_of(key) for key in keys}
    before = wire.writes
    mixed = keys * (CALLS // len(keys))
    assert await echo_all(clustered, mixed) == [f"{key}/{n}" for n, key in enumerate(mixed)]
    assert wire.writes - before == 2 * len(nodes) > 2  # per node: the first, then the rest


class Cluster:
    """The session cluster's nodes, by port, for moving one slot by hand."""

    def __init__(self, url: str) -> None:
        seed = int(url.rsplit(":", 1)[1].split("/")[0])
        with Redis(port=seed) as client:
            ranges = client.execute_command("CLUSTER", "SLOTS")
        self.owner = {slot: int(r[2][1]) for r in ranges for slot in range(r[0], r[1] + 1)}
        self.ports = sorted({int(r[2][1]) for r in ranges})

        self._clients: dict[int, Any] = {}

    def command(self, port: int, *args: Any) -> Any:
        client: Any = self._clients.get(port)
        if client is None:
            client = self._clients[port] = Redis(port=port)
        return client.execute_command(*args)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()

    def node_id(self, port: int) -> str:
        return str(self.command(port, "CLUSTER", "MYID").decode())

    def start(self, slot: int, source: int, target: int) -> None:
        self.command(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        self.command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))

    def migrate(self, slot: int, source: int, target: int, at_most: int = 10_000) -> int:
        """Move up to `at_most` of the slot's keys from `source` to `target`."""
        keys = self.command(source, "CLUSTER", "GETKEYSINSLOT", slot, at_most)
        if keys:
            self.command(source, "MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
        return len(keys)

    def finish(self, slot: int, target: int) -> None:
        owner = self.node_id(target)
        for port in [target, *(p for p in self.ports if p != target)]:
            self.command(port, "CLUSTER", "SETSLOT", slot, "NODE", owner)


@pytest.fixture
def cluster(cluster_url: str) -> Iterator[Cluster]:
    nodes = Cluster(cluster_url)
    try:
        yield nodes
    finally:
        nodes.close()


def other_port(cluster: Cluster, port: int) -> int:
    return next(p for p in cluster.ports if p != port)


async def test_a_slot_migrated_while_adds_run_loses_none(
    cluster_url: str, cluster: Cluster
) -> None:
    name = tagged()
    slot = key_slot(f"bull:{name}".encode())
    source = cluster.owner[slot]
    target = other_port(cluster, source)
    acknowledged: list[str] = []
    refused: list[str] = []  # TRYAGAIN past the retries (a slow host): not acknowledged
    stop = asyncio.Event()
    async with psyq.Queue(name, connection=cluster_url) as queue:

        async def adder() -> None:
            n = 0
            while not stop.is_set():
                try:
                    job = await queue.add("j", {"n": n})
                except psyq.ConnectionError as exc:
                    assert "still redirected" in str(exc)
                    refused.append(str(exc))
                    continue
                acknowledged.append(job.id)
                n += 1

        adders = [asyncio.ensure_future(adder()) for _ in range(4)]
        try:
            await eventually(lambda: len(acknowledged) >= 100, "adds before the move")
            await asyncio.to_thread(cluster.start, slot, source, target)
            while await asyncio.to_thread(cluster.migrate, slot, source, target, 20):
                pass  # some keys at a time: the adds meet ASK and TRYAGAIN meanwhile
            await asyncio.to_thread(cluster.finish, slot, target)
            moved = len(acknowledged)
            await eventually(lambda: len(acknowledged) >= moved + 100, "adds after the move")
        finally:
            stop.set()
            await asyncio.gather(*adders)
        backend: Any = queue._backend
        wire = backend._wire
        assert wire.primary_of(f"bull:{name}") == ("127.0.0.1", target)
        assert sum(wire.redirects.values()) >= 1
        assert len(set(acknowledged)) == len(acknowledged)
        assert await queue.count() == len(acknowledged)  # every add once, none lost
        assert len(refused) < len(acknowledged)
        await queue.obliterate(force=True)


async def test_ask_tryagain_and_moved_are_each_followed(cluster_url: str, cluster: Cluster) -> None:
    """Redis's rules while a slot migrates: a call whose keys are all gone from the source
    is ASKed to the target (ECHO's one key, the queue key, exists on neither); a call of
    several keys, some moved, gets TRYAGAIN (on the target too, while one is missing) until
    the slot is the target's; then the source answers MOVED."""
    name = tagged()
    key = f"bull:{name}"
    slot = key_slot(key.encode())
    source = cluster.owner[slot]
    target = other_port(cluster, source)
    async with psyq.Queue(name, connection=cluster_url) as queue:
        await queue.add_bulk([{"name": "before", "data": n} for n in range(5)])
        backend: Any = await queue._open()
        wire = backend._wire
        await asyncio.to_thread(cluster.start, slot, source, target)
        await asyncio.to_thread(cluster.migrate, slot, source, target, 2)  # some keys moved
        assert await wire.call(ECHO, key, ("asked",)) == "asked"
        assert wire.redirects["ASK"] == 1
        framed = MULTI + pack_command("EXISTS", key) + EXEC  # ASKING holds inside MULTI
        assert await wire.transaction(framed, 1, key) == [0]
        assert wire.redirects["ASK"] == 2
        adding = asyncio.ensure_future(queue.add("during"))
        await eventually(lambda: wire.redirects["TRYAGAIN"] >= 1, "a TRYAGAIN followed", 5)
        assert not adding.done()
        await asyncio.to_thread(cluster.migrate, slot, source, target)
        await asyncio.to_thread(cluster.finish, slot, target)
        await asyncio.wait_for(adding, 5)  # sent again to the source: MOVED to the target
        assert wire.redirects["MOVED"] == 1
        assert wire.primary_of(key) == ("127.0.0.1", target)
        await queue.add("after")  # straight to the target
        assert wire.redirects["MOVED"] == 1
        assert await queue.count() == 7
        assert cluster.command(target, "EXISTS", f"{key}:wait") == 1
        await queue.obliterate(force=True)
