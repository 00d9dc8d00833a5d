"""Redis Sentinel (issue 39): `redis+sentinel://host:port,.../<service>/<db>` finds the
primary through the Sentinels and follows a failover.

The test's own primary, replica and three Sentinels run on 127.0.0.1. A producer adds jobs
one after another and a worker runs them; the primary is killed (`kill -9`) under that load
and the Sentinels promote the replica. Counted like Jepsen's queue checker: adds
acknowledged, acknowledged jobs not found afterwards (lost), jobs run twice, and the time
from the kill to the first add that works again.

Replication is asynchronous: an add the primary acknowledged in the moment before the kill
may not have reached the replica, so by default a few may be lost (printed, not asserted
away). With `?wait_replicas=1` every batch of writes waits (WAIT) until one replica has it
before it is acknowledged; there the old primary is started again as the new primary's
replica once the replica took over (as an operator would), so writes find a replica to
wait for, and lost must be 0."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

import psyq
from tests.polling import eventually
from tests.redis_service import SentinelGroup

LOAD_S = 1.0  # adds under load before the kill
AFTER = 30  # adds that must work after the failover
LIMIT_S = 40  # a deadline, not a figure asserted


class Load:
    """Adds one job after another, counting each as acknowledged or failed."""

    def __init__(self, queue: psyq.Queue) -> None:
        self.queue = queue
        self.acknowledged: list[int] = []
        self.failed = 0
        self.first_ok_after: float | None = None
        self.killed_at: float | None = None
        self.failing = False  # an add failed since the kill

    async def run(self, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                await self.queue.add("j", n, {"jobId": f"j{n}"})
            except psyq.errors.ConnectionError:
                self.failed += 1
                self.failing = self.killed_at is not None
                await asyncio.sleep(0.05)  # sleep: the producer's pause before it adds again
                continue
            self.acknowledged.append(n)
            if self.failing and self.first_ok_after is None and self.killed_at is not None:
                self.first_ok_after = time.monotonic() - self.killed_at


POLL_S = 0.05  # between two looks at the Sentinels (each a redis-cli run) or the load


async def _exists(queue: psyq.Queue, job_id: str) -> bool:
    """Whether the job is stored, asked again while the store does not answer."""

    async def answer() -> list[bool]:
        """[whether it is stored], or [] while the store does not answer."""
        try:
            return [await queue.get_job(job_id) is not None]
        except (psyq.errors.ConnectionError, RedisError):  # queries raise redis-py's
            return []

    what = f"the store answering whether job {job_id} is stored"
    [stored] = await eventually(answer, what, LIMIT_S, interval=0.1)
    return stored


@pytest.mark.parametrize("mode", ["async", "wait_replicas=1", "first Sentinel down"])
async def test_a_sentinel_failover_under_load(
    sentinel_group: SentinelGroup, queue_name: str, mode: str
) -> None:
    """`first Sentinel down`: the URL names first a Sentinel that is down (asynchronous
    replication, as `async`)."""
    async with DownSentinel() as down:
        if mode == "first Sentinel down":
            url = _url_with_first_down(sentinel_group, down.address)
        else:
            url = sentinel_group.url("" if mode == "async" else "?wait_replicas=1&wait_timeout=200")
        await _failover_under_load(sentinel_group, queue_name, mode, url)


async def _failover_under_load(
    sentinel_group: SentinelGroup, queue_name: str, mode: str, url: str
) -> None:
    waits = mode.startswith("wait_replicas")
    runs: Counter[int] = Counter()

    async def process(job: psyq.Job) -> None:
        runs[job.data] += 1

    queue = psyq.Queue(queue_name, connection=url)
    worker = psyq.Worker(queue_name, process, connection=url, concurrency=5)
    worker.on("error", lambda error: None)  # the failover's errors: counted by the jobs
    load = Load(queue)
    stop = asyncio.Event()
    producing = asyncio.ensure_future(load.run(stop))
    old = sentinel_group.primary
    try:
        await asyncio.sleep(LOAD_S)  # sleep: the load runs a while before the kill
        before, failed_before = len(load.acknowledged), load.failed
        old.stop(signal.SIGKILL)
        load.killed_at = time.monotonic()
        await eventually(
            lambda: sentinel_group.primary_port() not in (0, old.port),
            "the replica's promotion",
            LIMIT_S,
            POLL_S,
        )
        promoted = time.monotonic() - load.killed_at
        if waits:  # back, once replaced, as the new primary's replica
            old.extra = ("--replicaof", "127.0.0.1", str(sentinel_group.primary_port()))
            old.start()
        await eventually(
            lambda: len(load.acknowledged) >= before + AFTER,
            f"{AFTER} adds after the kill",
            LIMIT_S,
            POLL_S,
        )
        stop.set()
        await producing
        acknowledged = set(load.acknowledged)
        found = {n for n in acknowledged if await _exists(queue, f"j{n}")}
        await eventually(lambda: found <= set(runs), "every job found run", LIMIT_S, POLL_S)
    finally:
        stop.set()
        await producing
        await worker.close()
        await queue.close()
    lost = acknowledged - found
    twice = sorted(n for n, count in runs.items() if count > 1)
    print(
        f"{mode}: acknowledged {len(acknowledged)} ({before} in {LOAD_S}s before the kill), "
        f"failed {load.failed} ({failed_before} before the kill), lost {len(lost)}, "
        f"run twice {len(twice)}, adds again "
        f"{load.first_ok_after:.1f}s after the kill (every Sentinel done after {promoted:.1f}s)"
    )
    if waits:
        assert lost == set()


async def test_the_bullmq_layer_takes_ioredis_sentinel_options(
    sentinel_group: SentinelGroup, queue_name: str
) -> None:
    from psyq.compat.bullmq import Queue

    sentinels = [{"host": "127.0.0.1", "port": port} for port in sentinel_group.sentinel_ports]
    connection = {"sentinels": sentinels, "name": SentinelGroup.SERVICE}
    queue = Queue(queue_name, {"connection": connection})
    try:
        job = await queue.add("j", {"n": 1})
        found = await queue.getJob(str(job.id))
        assert found is not None and found.data == {"n": 1}
    finally:
        await queue.close()


async def _ping_until_refused(client: Any, answered: set[int], n: int) -> None:
    """Ping again and again, as a call retrying after a failover does, until refused;
    `n` goes into `answered` once a ping of it was answered (the call is under way)."""

    async def refused() -> bool:
        try:
            await client.ping()
        except RedisConnectionError:
            return True
        answered.add(n)
        return False

    await eventually(refused, "a closed Sentinel client refusing a ping", interval=0.001)


def _connected(client: Any) -> list[Any]:
    """The connections of a Sentinel client still open: to the primary and the Sentinels."""
    pools = [client.connection_pool]
    pools += [
        watcher.connection_pool for watcher in client.connection_pool.sentinel_manager.sentinels
    ]
    every = [c for p in pools for c in (*p._available_connections, *p._in_use_connections)]
    return [c for c in every if c.is_connected]


async def test_a_closed_sentinel_client_connects_no_more(sentinel_group: SentinelGroup) -> None:
    """Calls still running when the client closes (the retries of a failover) and calls made
    afterwards are refused; none leaves a connection open to the primary or a Sentinel."""
    from psyq.backends.redis.sentinel import close_sentinel_client, new_sentinel_client
    from psyq.backends.redis.settings import parse_redis_settings

    settings = parse_redis_settings(sentinel_group.url()).sentinel
    assert settings is not None
    client = new_sentinel_client(settings, retry=None)
    assert await client.ping()
    answered: set[int] = set()
    running = [asyncio.ensure_future(_ping_until_refused(client, answered, n)) for n in range(8)]
    await eventually(lambda: len(answered) == len(running), "every call under way")
    await close_sentinel_client(client)
    await asyncio.gather(*running)
    with pytest.raises(RedisConnectionError, match="closed"):
        await client.ping()
    assert _connected(client) == []


async def test_a_sentinel_client_close_cancelled_half_way_leaves_no_connection(
    sentinel_group: SentinelGroup,
) -> None:
    """A close cancelled at its first step (a worker's close cut short) still closes every
    connection, to the primary and to the Sentinels."""
    from psyq.backends.redis.sentinel import close_sentinel_client, new_sentinel_client
    from psyq.backends.redis.settings import parse_redis_settings

    settings = parse_redis_settings(sentinel_group.url()).sentinel
    assert settings is not None
    client = new_sentinel_client(settings)
    await asyncio.gather(*(client.ping() for _ in range(4)))  # a few connections of each
    writers = [conn._writer for conn in _connected(client)]
    assert len(writers) >= 2
    closing = asyncio.ensure_future(close_sentinel_client(client))
    await asyncio.sleep(0)
    closing.cancel()
    await asyncio.gather(closing, return_exceptions=True)
    assert all(writer.transport.is_closing() for writer in writers)
    assert _connected(client) == []


def test_a_sentinel_client_over_tls_keeps_tls_to_the_primary_and_the_sentinels() -> None:
    from redis.asyncio.connection import SSLConnection

    from psyq.backends.redis.sentinel import new_sentinel_client
    from psyq.backends.redis.settings import parse_redis_settings

    settings = parse_redis_settings("rediss+sentinel://h1:26379,h2/mymaster/0").sentinel
    assert settings is not None
    client = new_sentinel_client(settings)
    watchers = client.connection_pool.sentinel_manager.sentinels
    assert issubclass(client.connection_pool.connection_class, SSLConnection)
    assert all(issubclass(w.connection_pool.connection_class, SSLConnection) for w in watchers)


def test_a_sentinel_url_names_its_sentinels_service_and_credentials() -> None:
    from psyq.backends.redis.settings import parse_redis_settings

    url = "rediss+sentinel://u:p%40w@h1:26379,h2/mymaster/2?sentinel_password=s&wait_replicas=1"
    settings = parse_redis_settings(url)
    assert settings.sentinel is not None
    assert settings.sentinel.sentinels == [("h1", 26379), ("h2", 26379)]
    assert settings.sentinel.service == "mymaster"
    assert settings.sentinel.node_options == {
        "db": 2,
        "ssl": True,
        "username": "u",
        "password": "p@w",
    }
    assert settings.sentinel.sentinel_options == {"username": None, "password": "s", "ssl": True}
    assert (settings.wait_replicas, settings.wait_timeout_ms) == (1, 1000)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis+sentinel://h1:26379/", "<service>"),
        ("redis+sentinel://h1:x/mymaster/0", "host:port"),
        ("redis+sentinel://h1/mymaster/zero", "database"),
        ("redis://h/0?wait_replicas=-1", "wait_replicas"),
        ("redis://h/0?wait_replicas=1&wait_timeout=0", "wait_timeout"),
        ("redis+cluster://h:7000/?wait_replicas=1", "Redis Cluster"),
    ],
)
def test_a_bad_sentinel_or_wait_url_is_refused_by_name(url: str, named: str) -> None:
    from psyq.backends.redis.settings import parse_redis_settings

    with pytest.raises(psyq.errors.InvalidURLError, match=named):
        parse_redis_settings(url)


class DownSentinel:
    """A Sentinel that is down: its port takes each connection and closes it at once (as a
    host whose Sentinel crashed behind a proxy would), counting the attempts."""

    def __init__(self) -> None:
        self.attempts = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> DownSentinel:
        self.server = await asyncio.start_server(self._refuse, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.attempts += 1
        writer.close()


def _url_with_first_down(group: SentinelGroup, down: str) -> str:
    hosts = ",".join([down, *(f"127.0.0.1:{port}" for port in group.sentinel_ports)])
    return f"redis+sentinel://{hosts}/{SentinelGroup.SERVICE}/0"


async def test_a_client_asks_a_sentinel_that_is_down_once_then_the_next(
    sentinel_group: SentinelGroup,
) -> None:
    """The first Sentinel of the URL down: a new client's first call asks it once (no
    connect retries with backoff on a Sentinel: the next one is asked instead) and works."""
    from psyq.backends.redis.sentinel import close_sentinel_client, new_sentinel_client
    from psyq.backends.redis.settings import parse_redis_settings

    async with DownSentinel() as down:
        settings = parse_redis_settings(_url_with_first_down(sentinel_group, down.address))
        assert settings.sentinel is not None
        client = new_sentinel_client(settings.sentinel)
        try:
            started = time.monotonic()
            assert await client.ping()
            print(f"\nfirst call with the first Sentinel down: {time.monotonic() - started:.2f} s")
        finally:
            await close_sentinel_client(client)
    assert down.attempts == 1


async def test_a_queue_and_worker_work_with_the_first_sentinel_down(
    sentinel_group: SentinelGroup, queue_name: str
) -> None:
    async with DownSentinel() as down:
        url = _url_with_first_down(sentinel_group, down.address)
        done = asyncio.Event()

        async def process(job: psyq.Job) -> None:
            done.set()

        started = time.monotonic()
        async with (
            psyq.Queue(queue_name, connection=url) as queue,
            psyq.Worker(queue_name, process, connection=url),
        ):
            job = await queue.add("x", {"n": 1})
            print(f"\nfirst add with the first Sentinel down: {time.monotonic() - started:.2f} s")
            await asyncio.wait_for(done.wait(), LIMIT_S)
            assert await queue.get_job(job.id) is not None
    print(f"asks of the Sentinel that is down: {down.attempts}")
    # one ask of each new connection (the queue's, the worker's), never a retry of it
    assert 1 <= down.attempts <= 6, down.attempts
