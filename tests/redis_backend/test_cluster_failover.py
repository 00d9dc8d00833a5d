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

import time
import uuid

from redis.crc import key_slot

import psyq
from psyq.errors import PsyqError
from tests.polling import eventually
from tests.redis_service import FailoverCluster

LIMIT_S = 30  # a deadline, not a figure asserted
AUTOMATIC_S = 10  # the automatic failover's deadline, before a CLUSTER FAILOVER TAKEOVER
BEFORE = 20
POLL_S = 0.05  # between two looks at the cluster (each a redis-cli run) or two adds


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
        await eventually(lambda: len(done) == BEFORE, "the jobs before the kill", LIMIT_S)
        replica = failover_cluster.replica_of(slot, primary)
        written = failover_cluster.replication_offset(primary)
        await eventually(  # asynchronous replication: the replica's copy catches up
            lambda: failover_cluster.replication_offset(replica) >= written,
            "the replica has every write of its primary",
            LIMIT_S,
            POLL_S,
        )
        failover_cluster.kill(primary)
        killed = time.monotonic()

        def promoted() -> bool:
            return failover_cluster.primary_of(slot, replica) not in (0, primary)

        how = "promoted"
        try:
            await eventually(promoted, "the replica's promotion", AUTOMATIC_S, POLL_S)
        except AssertionError:  # a loaded machine can hold up the election: take over
            failover_cluster.take_over(replica)
            await eventually(promoted, "the replica's takeover", LIMIT_S, POLL_S)
            how = f"no election within {AUTOMATIC_S}s, taken over"
        promoted_after = time.monotonic() - killed
        counter = iter([BEFORE] * 10**6)  # the same job data until one add works
        await eventually(lambda: add(next(counter)), "an add after the failover", LIMIT_S, POLL_S)
        add_after = time.monotonic() - killed
        for n in range(BEFORE + 1, 2 * BEFORE):
            assert await add(n)
        fresh = psyq.Queue(name, connection=url)  # a new Queue of the same process
        try:
            acknowledged.append((await fresh.add("j", 2 * BEFORE)).data)
        finally:
            await fresh.close()
        await eventually(lambda: done >= set(acknowledged), "every acknowledged job run", LIMIT_S)
        run_after = time.monotonic() - killed
        completed = await queue.get_job_counts("completed")
        read = completed["completed"]
        await eventually(lambda: len(announced) >= read, "every completion's event read", LIMIT_S)
    finally:
        await events.close()
        await worker.close()
        await queue.close()
    print(
        f"{how} {promoted_after:.1f}s after the kill; adds again {add_after:.1f}s; "
        f"every acknowledged job run {run_after:.1f}s; acknowledged {len(acknowledged)}, "
        f"lost {len(set(acknowledged) - done)}"
    )


def _queue_served_by(cluster: FailoverCluster, port: int) -> tuple[str, int]:
    """A queue name (and its slot) whose slot the primary on `port` serves: the node the
    URL names, which redis-py also asks where a movable-key command's keys live (the worst
    node to lose)."""
    while True:
        name = f"{{fo{uuid.uuid4().hex[:8]}}}q"
        slot = key_slot(f"bull:{name}".encode())
        if cluster.primary_of(slot, port) == port:
            return name, slot
