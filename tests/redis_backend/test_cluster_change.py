"""Redis Cluster under change (issue 55): the queue's slot moved to another primary while
jobs are added and a worker of concurrency 100 runs them, then `kill -9` of the slot's
primary under the same load, a replica promoted.

One cluster for the module (3 primaries with a replica each, `cluster-node-timeout`
1000 ms), the tests in order: the move, then the kill. The move is what `redis-cli
--cluster reshard` does for one slot, driven by the test so it moves the queue's own slot:
CLUSTER SETSLOT IMPORTING on the target and MIGRATING on the source, MIGRATE of the slot's
keys 10 at a time (redis-cli's default pipeline), then CLUSTER SETSLOT NODE on every
primary. While the keys are split, a script reaching both halves is refused (TRYAGAIN,
ASK): nothing it would write is written, the call fails or is resent.

Counted like Jepsen's queue checker: every add acknowledged runs; after the move none runs
twice (nothing crashed); after the kill a job may run again (its completion was written on
the dead primary only), and the count is printed. Before the kill the adds pause until the
replica has every write (replication is asynchronous; `wait_replicas` is refused on a
cluster), so the acknowledged adds are on the replica that takes over."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.crc import key_slot
from redis.exceptions import RedisError

import psyq
from psyq.errors import PsyqError
from tests.polling import eventually
from tests.redis_service import FailoverCluster

LIMIT_S = 30  # a deadline, not a figure asserted
AUTOMATIC_S = 10  # the automatic failover's deadline, before a CLUSTER FAILOVER TAKEOVER
POLL_S = 0.05
ADDERS = 4  # producers adding one job after another
BEFORE = 100  # adds acknowledged before the change
AFTER = 100  # adds acknowledged after it
PIPELINE = 10  # keys per MIGRATE, as redis-cli --cluster reshard


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailoverCluster]:
    nodes = FailoverCluster(Path(tmp_path_factory.mktemp("change")))
    try:
        nodes.url = nodes.start()
        yield nodes
    finally:
        nodes.stop()


class Load:
    """`ADDERS` producers adding job after job (data n, id jn) through one Queue, and a
    Worker of concurrency 100 counting each job's runs. `gate` pauses the adds."""

    def __init__(self, url: str, name: str, **worker: Any) -> None:
        self.queue = psyq.Queue(name, connection=url)
        self.runs: Counter[int] = Counter()
        self.worker = psyq.Worker(name, self.process, connection=url, concurrency=100, **worker)
        self.errors: Counter[str] = Counter()
        self.worker.on("error", lambda error: self.errors.update([type(error).__name__]))
        self.worker.on("failed", lambda job, error: self.errors.update([f"job failed: {error}"]))
        self.acknowledged: list[int] = []
        self.failed: Counter[str] = Counter()
        self.gate, self.stop = asyncio.Event(), asyncio.Event()
        self.gate.set()
        self.in_flight = 0
        self.numbers = iter(range(1, 10**9))
        self.tasks = [asyncio.ensure_future(self.adder()) for _ in range(ADDERS)]

    async def process(self, job: psyq.Job) -> None:
        self.runs[job.data] += 1
        await asyncio.sleep(0.01)  # sleep: the job's work, so many run at once

    async def adder(self) -> None:
        while not self.stop.is_set():
            await self.gate.wait()
            n = next(self.numbers)
            self.in_flight += 1
            try:
                await self.queue.add("j", n, {"jobId": f"j{n}"})
            except (PsyqError, RedisError) as error:  # counted: not acknowledged
                self.failed.update([f"{type(error).__name__}: ...{str(error)[-70:]}"])
                await asyncio.sleep(POLL_S)  # sleep: the producer's pause before it adds again
                continue
            finally:
                self.in_flight -= 1
            self.acknowledged.append(n)

    async def acknowledged_more(self, count: int, what: str) -> None:
        target = len(self.acknowledged) + count
        await eventually(lambda: len(self.acknowledged) >= target, what, LIMIT_S, POLL_S)

    async def pause(self) -> None:
        self.gate.clear()
        await eventually(lambda: self.in_flight == 0, "the adds in flight answered", LIMIT_S)

    async def finish(self) -> tuple[set[int], list[int]]:
        """Stop adding, wait until every acknowledged job ran: (lost, run twice)."""
        self.stop.set()
        self.gate.set()
        await asyncio.gather(*self.tasks)
        acknowledged = set(self.acknowledged)
        await eventually(
            lambda: acknowledged <= set(self.runs), "every acknowledged job run", LIMIT_S
        )
        return acknowledged - set(self.runs), sorted(n for n, c in self.runs.items() if c > 1)

    async def close(self) -> None:
        self.stop.set()
        self.gate.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.worker.close()
        await self.queue.close()

    def summary(self) -> str:
        twice = sum(1 for count in self.runs.values() if count > 1)
        return (
            f"acknowledged {len(self.acknowledged)}, failed adds {dict(self.failed)}, "
            f"run twice {twice}, worker errors {dict(self.errors)}"
        )


def queue_on(cluster: FailoverCluster) -> tuple[str, int, int]:
    """A fresh queue name, its slot and the port of the primary serving it."""
    name = f"{{ch{uuid.uuid4().hex[:8]}}}q"
    slot = key_slot(f"bull:{name}".encode())
    return name, slot, cluster.primary_of(slot, cluster.seed)


def move_slot(cluster: FailoverCluster, slot: int, source: int, target: int) -> int:
    """Move `slot` from the primary on `source` to the one on `target` as `redis-cli
    --cluster reshard` does; the number of keys moved."""
    clients: dict[int, Any] = {port: Redis(port=port) for port in cluster.primaries()}
    try:
        ids = {port: client.execute_command("CLUSTER MYID") for port, client in clients.items()}
        clients[target].execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[source])
        clients[source].execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[target])
        moved = 0
        while keys := clients[source].execute_command("CLUSTER GETKEYSINSLOT", slot, PIPELINE):
            command = ["MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys]
            clients[source].execute_command(*command)
            moved += len(keys)
        for port in (target, source, *clients):  # the owners first, as redis-cli
            clients[port].execute_command("CLUSTER SETSLOT", slot, "NODE", ids[target])
        return moved
    finally:
        for client in clients.values():
            client.close()


async def test_the_queue_slot_moves_to_another_primary_under_load(
    cluster: FailoverCluster,
) -> None:
    name, slot, source = queue_on(cluster)
    target = next(port for port in cluster.primaries() if port != source)
    load = Load(cluster.url, name)
    try:
        await load.acknowledged_more(BEFORE, f"{BEFORE} adds before the move")
        started = time.monotonic()
        moved = await asyncio.to_thread(move_slot, cluster, slot, source, target)
        took = time.monotonic() - started
        assert cluster.primary_of(slot, cluster.seed) == target
        await load.acknowledged_more(AFTER, f"{AFTER} adds after the move")
        lost, twice = await load.finish()
    finally:
        await load.close()
    print(f"moved {moved} keys in {took:.2f}s; {load.summary()}")
    assert lost == set()
    assert twice == []  # nothing crashed: no job runs again


async def test_the_slot_primary_killed_under_load_a_replica_takes_over(
    cluster: FailoverCluster,
) -> None:
    name, slot, primary = queue_on(cluster)
    load = Load(cluster.url, name, lock_duration=2000, stalled_interval=1000)
    try:
        await load.acknowledged_more(BEFORE, f"{BEFORE} adds before the kill")
        await load.pause()
        replica = cluster.replica_of(slot, primary)
        written = cluster.replication_offset(primary)
        await eventually(
            lambda: cluster.replication_offset(replica) >= written,
            "the replica has every write of its primary",
            LIMIT_S,
            POLL_S,
        )
        cluster.kill(primary)
        killed = time.monotonic()
        load.gate.set()
        how = await promote(cluster, slot, replica, primary)
        await load.acknowledged_more(AFTER, f"{AFTER} adds after the kill")
        adds_again = time.monotonic() - killed
        lost, _ = await load.finish()
    finally:
        await load.close()
    print(f"{how}; {AFTER} adds again {adds_again:.1f}s after the kill; {load.summary()}")
    assert lost == set()


async def promote(cluster: FailoverCluster, slot: int, replica: int, primary: int) -> str:
    """Wait for `replica`'s election (taking over without one after `AUTOMATIC_S`)."""
    started = time.monotonic()

    def promoted() -> bool:
        return cluster.primary_of(slot, replica) not in (0, primary)

    try:
        await eventually(promoted, "the replica's promotion", AUTOMATIC_S, POLL_S)
        how = "promoted"
    except AssertionError:  # a loaded machine can hold up the election: take over
        cluster.take_over(replica)
        await eventually(promoted, "the replica's takeover", LIMIT_S, POLL_S)
        how = f"no election within {AUTOMATIC_S}s, taken over"
    return f"{how} {time.monotonic() - started:.1f}s after the kill"
