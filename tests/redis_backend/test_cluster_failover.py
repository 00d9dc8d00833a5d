"""Redis Cluster failover (issue 39): a running process goes on after the primary holding its
queue's slot is killed (`kill -9`) and its replica takes over. The same Queue, Worker and
QueueEvents objects keep adding, processing and reading events; a lost connection or a
MOVED makes the backend read the slot map again.

The cluster is the test's own (3 primaries with a replica each, `cluster-node-timeout`
1000 ms). Counted like Jepsen's queue checker: every add the Queue acknowledged is run (the
replica had it: the primary acknowledged it and the test waits for replication before the
kill), and the test prints the time from the kill to the first add that works again and
to the first job run after it. The primary killed is the node the URL names: redis-py asks
that one where an XREAD's keys live, so a QueueEvents read kept failing once it was gone
until the backend sent XREAD to the slot's node itself."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from redis.crc import key_slot

import psyq
from psyq.errors import PsyqError
from tests.redis_service import FailoverCluster

LIMIT_S = 30  # a deadline, not a figure asserted
AUTOMATIC_S = 10  # the automatic failover's deadline, before a CLUSTER FAILOVER TAKEOVER
BEFORE = 20


async def _wait(check: Any, what: str, limit: float = LIMIT_S) -> None:
    deadline = time.monotonic() + limit
    while not await check():
        assert time.monotonic() < deadline, f"{what} not within {limit}s"
        await asyncio.sleep(0.05)


async def test_a_running_process_goes_on_after_a_primary_failover(
    failover_cluster: FailoverCluster,
) -> None:
    url = failover_cluster.start()
    seed = next(iter(failover_cluster.procs))  # the node the URL names
    name, slot = _queue_served_by(failover_cluster, seed)
    primary = seed
    done: set[int] = set()

    async def process(job: psyq.Job) -> None:
        done.add(job.data)

    queue = psyq.Queue(name, connection=url)
    worker = psyq.Worker(queue.name, process, connection=url, drain_delay=0.5)
    worker.on("error", lambda error: None)  # the failover's errors: counted by the jobs
    events = psyq.QueueEvents(name, connection=url, last_event_id="0")
    events.on("error", lambda error: None)
    announced: set[str] = set()
    events.on("completed", lambda args, event_id: announced.add(args["jobId"]))
    acknowledged: list[int] = []

    async def add(n: int) -> bool:
        try:
            await queue.add("j", n)
        except PsyqError:
            return False
        acknowledged.append(n)
        return True

    try:
        for n in range(BEFORE):
            assert await add(n)
        await _wait(lambda: _true(len(done) == BEFORE), "the jobs before the kill")
        await asyncio.sleep(0.2)  # the replica's copy (async replication) catches up
        replica = failover_cluster.replica_of(slot, primary)
        failover_cluster.kill(primary)
        killed = time.monotonic()

        async def promoted() -> bool:
            return failover_cluster.primary_of(slot, replica) not in (0, primary)

        how = "promoted"
        try:
            await _wait(promoted, "the replica's promotion", AUTOMATIC_S)
        except AssertionError:  # a loaded machine can hold up the election: take over
            failover_cluster.take_over(replica)
            await _wait(promoted, "the replica's takeover")
            how = f"no election within {AUTOMATIC_S}s, taken over"
        promoted_after = time.monotonic() - killed
        counter = iter([BEFORE] * 10**6)  # the same job data until one add works
        await _wait(lambda: add(next(counter)), "an add after the failover")
        add_after = time.monotonic() - killed
        for n in range(BEFORE + 1, 2 * BEFORE):
            assert await add(n)
        fresh = psyq.Queue(name, connection=url)  # a new Queue of the same process
        try:
            acknowledged.append((await fresh.add("j", 2 * BEFORE)).data)
        finally:
            await fresh.close()
        await _wait(lambda: _true(done >= set(acknowledged)), "every acknowledged job run")
        run_after = time.monotonic() - killed
        completed = await queue.get_job_counts("completed")
        await _wait(lambda: _true(len(announced) >= completed["completed"]), "events read")
    finally:
        await events.close()
        await worker.close()
        await queue.close()
    print(
        f"{how} {promoted_after:.1f}s after the kill; adds again {add_after:.1f}s; "
        f"every acknowledged job run {run_after:.1f}s; acknowledged {len(acknowledged)}, "
        f"lost {len(set(acknowledged) - done)}"
    )


async def _true(value: bool) -> bool:
    return value


def _queue_served_by(cluster: FailoverCluster, port: int) -> tuple[str, int]:
    """A queue name (and its slot) whose slot the primary on `port` serves: the node the
    URL names, which redis-py also asks where a movable-key command's keys live (the worst
    node to lose)."""
    while True:
        name = f"{{fo{uuid.uuid4().hex[:8]}}}q"
        slot = key_slot(f"bull:{name}".encode())
        if cluster.primary_of(slot, port) == port:
            return name, slot
