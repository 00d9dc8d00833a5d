"""The connections of a Redis backend and the one way scripts run.

Script calls go over `wire.WireScripts` (one auto-pipelined connection of psyq's own) on a
plain `redis://` URL, over `cluster_wire.ClusterWire` (one such connection per primary) on
`redis+cluster://`, else over redis-py (`scripts.ScriptPipeline`); queries share a
bounded redis-py pool; blocking reads (BZPOPMIN on a queue's marker, XREAD BLOCK) hold
connections of their own. `RedisConnection` is the base of the backend's parts (adding,
transitions, queries, admin, flows, events, schedulers): each is a class of its own module,
and `backend.RedisBackend` puts them together.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry as RedisRetry
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from psyq.backends.base import (
    BackendAdapter,
    raise_for_code,
)
from psyq.backends.redis.cluster import check_tagged
from psyq.backends.redis.cluster_wire import ClusterWire
from psyq.backends.redis.scripts import Script, ScriptPipeline, load_scripts, pooled_connection
from psyq.backends.redis.sentinel import close_sentinel_client, new_sentinel_client
from psyq.backends.redis.settings import parse_redis_settings
from psyq.backends.redis.wire import EXEC, MULTI, WireScripts, wire_address
from psyq.errors import ConnectionError, PsyqError
from psyq.rules.reconnect import Reconnect, until_done

__all__ = ["CONNECTION_ERRORS", "PSYQ_WORKER_SUFFIX", "RedisConnection", "worker_client_name"]

log = logging.getLogger("psyq.redis")

# psyq's workers block on connections named as BullMQ names a named worker's
# (`<prefix>:<base64(queue)>:w:<name>`), so Node's getWorkers lists them; the name "psyq"
# tells psyq's own get_workers which ones are its own (it lists them from its registry).
PSYQ_WORKER_SUFFIX = ":w:psyq"


def worker_client_name(prefix: str, queue: str) -> str:
    """BullMQ's connection name for a worker of `queue`, without the `:w:<name>` part."""
    return f"{prefix}:{base64.b64encode(queue.encode()).decode()}"


T = TypeVar("T")

MIN_VERSION = (5, 0, 0)
POOL_SIZE = 32  # connections for commands; a URL's max_connections=N overrides it
CLUSTER_POOL_SIZE = 1024  # connections per cluster node (redis-py raises past it)
QUEUE_KEYS_CACHED = 10_000
_SCRIPTS: dict[str, Script] = {}
# What a lost connection raises (redis-py's BusyLoadingError, a server still loading its
# data after a restart, is one of its ConnectionErrors).
CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)
# Blocking reads (BZPOPMIN, XREAD BLOCK) end by their own block, which may be longer than
# redis-py's socket timeout (5 s by default in redis-py 8): their connections have none
# (a URL's socket_timeout is not applied to them), so an idle read is no error; TCP
# keepalive finds a peer that is gone.
_BLOCKING: dict[str, Any] = {"socket_timeout": None, "socket_keepalive": True}


def _scripts() -> dict[str, Script]:
    if not _SCRIPTS:
        _SCRIPTS.update(load_scripts())
    return _SCRIPTS


class RedisConnection(BackendAdapter):
    """Clients, scripts and the queue keys of one Redis backend (see the top)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        settings = parse_redis_settings(url)
        self._redis_url, self.prefix, self.cluster = settings.url, settings.prefix, settings.cluster
        self._blocking_url = settings.blocking_url
        self._sentinel = settings.sentinel
        self._queue_keys: dict[str, str] = {}  # queue -> `<prefix>:<queue>`, checked once
        # redis-py's asyncio stubs type replies as bytes | str (and commands as maybe-awaitable);
        # with decode_responses=True they are str: the clients are typed Any here.
        self._client: Any = None
        self._blocking: Any = None
        self._whole_second_timeouts = False
        self._waiting: dict[str, Any] = {}  # queue -> client whose connections BZPOPMIN
        self._scripts = _scripts()
        wait = (settings.wait_replicas, settings.wait_timeout_ms)
        self._pipeline = ScriptPipeline(cluster=self.cluster, wait=wait if wait[0] else None)
        self.wait_replicas = settings.wait_replicas
        self._wire = _lean_wire(
            self._redis_url, self.cluster, plain=not (self._sentinel or settings.wait_replicas)
        )
        self._reconnect = Reconnect()  # paces calls while the server does not answer
        self._slots_stale = False  # a cluster's slot map to read again: see _refresh_slots
        self._blocking_reads: set[asyncio.Task[Any]] = set()  # see _uncancelled
        self._bookkeeping: set[asyncio.Task[Any]] = set()  # see _keep_trying

    # ------------------------------------------------------------------ lifecycle
    def _new_client(self, blocking: bool = False, name: str | None = None) -> Any:
        """Commands share a bounded pool (callers wait for a free connection); blocking reads
        (BZPOPMIN, XREAD BLOCK) hold a connection each, from their own unbounded pool,
        named `name` (CLIENT SETNAME) when given, with no socket timeout (`_BLOCKING`).
        No automatic retries: redis-py would retry a command whose task is being cancelled."""
        if self.cluster:
            return self._new_cluster_client(blocking, name)
        if self._sentinel is not None:
            return self._new_sentinel_client(blocking, name)
        options: dict[str, Any] = {"decode_responses": True, "retry": None}
        if blocking:
            pool = ConnectionPool.from_url(
                self._blocking_url, max_connections=2**20, client_name=name, **options, **_BLOCKING
            )
        else:
            pool = BlockingConnectionPool.from_url(
                self._redis_url, max_connections=POOL_SIZE, timeout=None, **options
            )
        return Redis.from_pool(pool)  # the client owns the pool: aclose() closes it

    def _new_cluster_client(self, blocking: bool, name: str | None) -> Any:
        """A RedisCluster client: it follows the cluster's slots and MOVED replies, one
        connection pool per node. A node's pool does not make
        callers wait, it raises when full: the bound is high, blocking reads hold one each."""
        options: dict[str, Any] = {"decode_responses": True, "client_name": name}
        options["retry"] = RedisRetry(NoBackoff(), 0)  # as above; MOVED is still followed
        if blocking:
            options.update(_BLOCKING, max_connections=2**16)
            return RedisCluster.from_url(self._blocking_url, **options)
        return RedisCluster.from_url(self._redis_url, max_connections=CLUSTER_POOL_SIZE, **options)

    def _new_sentinel_client(self, blocking: bool, name: str | None) -> Any:
        """A client of the primary the Sentinels name (see sentinel.py): a connection to
        a demoted primary fails on READONLY and is opened again. Its pool raises when full
        rather than making callers wait: the bound is high."""
        assert self._sentinel is not None
        options: dict[str, Any] = {"retry": None, "client_name": name}
        options.update(_BLOCKING if blocking else {}, max_connections=2**16 if blocking else 1024)
        return new_sentinel_client(self._sentinel, **options)

    async def open(self) -> None:
        client = self._new_client()
        try:
            await self._check_server(client)
        except BaseException as exc:  # refused, unreachable or cancelled: nothing left open
            await _close_client(client)  # a Sentinel client's own connections too
            if isinstance(exc, (RedisError, RedisClusterException)):
                raise ConnectionError(self.url, str(exc)) from None
            raise
        blocking = self._new_client(blocking=True)
        if self.cluster:  # its slot map and command table now, not on a QueueEvents' first read
            try:
                await blocking.initialize()
            except BaseException:  # cancelled (or lost) here too: nothing left open
                await _close_clients([blocking, client])
                raise
        self._client, self._blocking = client, blocking

    async def _check_server(self, client: Any) -> None:
        if self.cluster:
            await client.initialize()  # reads the slots: fails on a non-cluster server
        info = await client.info("server")
        policy = await _maxmemory_policy(client)
        version = str(info.get("redis_version", "0"))
        numbers = tuple(int(part) for part in version.split(".")[:3] if part.isdigit())
        if numbers < MIN_VERSION:
            raise ConnectionError(self.url, f"Redis {version} is too old: psyq needs >= 5.0.0")
        self._whole_second_timeouts = numbers < (6, 0, 0)  # BZPOPMIN takes decimals from 6.0
        if policy not in (None, "noeviction"):
            log.warning(
                "Redis at %s has maxmemory-policy %r: set it to 'noeviction', or Redis may "
                "evict job keys under memory pressure",
                self.safe_url,
                policy,
            )

    async def close(self) -> None:
        await self._pipeline.wait_idle()
        if self._wire is not None:
            await self._wire.wait_idle()
            self._wire.close()
        await _cancelled(self._bookkeeping)  # not landed: the next worker start repairs it
        clients = [c for c in (self._client, self._blocking, *self._waiting.values()) if c]
        await self._stop_blocking_reads(clients)
        self._client = self._blocking = None
        self._waiting.clear()

    async def _uncancelled(self, call: Awaitable[T]) -> T:
        """Await a blocking Redis read so that cancelling the caller never cancels it.

        redis-py can lose a cancellation that arrives while a command is in flight (the call
        then returns normally, and a closing worker never stops). The command runs in its
        own task, shielded; a cancelled caller gets CancelledError at once and the command
        finishes by itself (within its timeout), returning its connection, unless the
        backend closes first (see _stop_blocking_reads)."""
        task = asyncio.ensure_future(call)
        self._blocking_reads.add(task)
        task.add_done_callback(self._blocking_reads.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_drop_result)
            raise

    async def _stop_blocking_reads(self, clients: list[Any]) -> None:
        """Cancel the blocking reads still running (their callers are gone: the backend is
        closing), then close `clients`. A read that a cancel does not stop (a cluster
        client's command runs on) ends when its connection closes; one that was still
        reading a cluster's slot map may open a connection meanwhile, so the clients are
        closed again once every read is over."""
        reads = list(self._blocking_reads)
        for task in reads:
            task.cancel()
        if reads:
            await asyncio.wait(reads, timeout=0.2)
        await _close_clients(clients)
        if reads:
            await asyncio.gather(*reads, return_exceptions=True)
            await _close_clients(clients)

    def _keep_trying(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        """Run `call` in a task of its own again and again while the server does not
        answer, until it lands (`until_done`): worker-side bookkeeping that failed on a
        lost connection (a scheduler's next run) is retried, never dropped. The backend's
        close cancels what has not landed yet."""
        log.warning("%s failed on a lost connection: retrying until Redis answers", what)
        retrying = until_done(call, CONNECTION_ERRORS, lambda exc: log.debug("%s: %s", what, exc))
        task = asyncio.ensure_future(retrying)
        self._bookkeeping.add(task)
        task.add_done_callback(lambda done: self._bookkeeping_done(what, done))

    def _bookkeeping_done(self, what: str, task: asyncio.Task[Any]) -> None:
        self._bookkeeping.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", what, exc_info=task.exception())
        elif not task.cancelled():
            log.info("%s done once Redis answered again", what)

    @property
    def client(self) -> Any:
        if self._client is None:
            raise PsyqError(f"the Redis backend {self.safe_url!r} is not open")
        return self._client

    async def now_ms(self) -> int:
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # ------------------------------------------------------------------ plumbing
    @property
    def key_prefix(self) -> str:
        return self.prefix  # job keys `<prefix>:<queue>:<id>`, BullMQ's Redis form

    def queue_key(self, queue: str) -> str:
        """`<prefix>:<queue>`, built once per queue (on a cluster, checked for a hash tag)."""
        key = self._queue_keys.get(queue)
        if key is None:
            if self.cluster:
                check_tagged(self.prefix, queue)
            if len(self._queue_keys) >= QUEUE_KEYS_CACHED:
                self._queue_keys.clear()
            key = self._queue_keys[queue] = f"{self.prefix}:{queue}"
        return key

    async def _run(self, name: str, queue: str, *args: Any) -> Any:
        """Run a script. While the server does not answer, calls are paced by one shared
        capped, jittered backoff, and each failure raises psyq's ConnectionError (the
        broken connection is opened again on the next call)."""
        if self._reconnect.failures or self._slots_stale:  # inline: the hot path
            await self._paced()
        script = self._scripts[name]
        try:
            if self._wire is not None and self._client is not None:
                result = await self._wire.call(script, self.queue_key(queue), args)
            else:
                result = await self._pipeline.call(self.client, script, self.queue_key(queue), args)
        except (RedisError, OSError) as exc:
            raise self._script_error(name, queue, exc) from exc
        self._reconnect.failures = 0
        return result

    async def _transaction(self, what: str, queue: str, packed: bytes, count: int) -> list[Any]:
        """Run `count` packed commands (about `queue`'s keys) as one MULTI/EXEC: one round
        trip, atomic, no script (Redis answers plain commands at less than half the cost of
        the same reads from Lua). Returns EXEC's replies; an error reply raises PsyqError.
        Paced and mapped like `_run`."""
        if self._reconnect.failures or self._slots_stale:
            await self._paced()
        replies: list[Any]
        framed = b"%b%b%b" % (MULTI, packed, EXEC)
        try:
            key = self.queue_key(queue)
            if self._wire is not None and self._client is not None:
                replies = await self._wire.transaction(framed, count, key)
            else:
                replies = await _client_transaction(self.client, key, framed, count)
        except CONNECTION_ERRORS as exc:
            raise self._lost(f"{what} on queue {queue!r}", exc) from exc
        except (RedisError, RedisClusterException) as exc:
            self._slots_stale = self.cluster  # EXECABORT: maybe a MOVED (a failover)
            raise PsyqError(f"Redis {what} failed on queue {queue!r}: {exc}") from exc
        self._reconnect.failures = 0
        failed = _first_error(replies)
        if failed is not None:
            raise PsyqError(f"Redis {what} failed on queue {queue!r}: {failed}")
        return replies

    def _script_error(self, name: str, queue: str, exc: BaseException) -> PsyqError:
        if isinstance(exc, CONNECTION_ERRORS):
            return self._lost(f"script {name} on queue {queue!r}", exc)
        return PsyqError(f"Redis script {name} failed on queue {queue!r}: {exc}")

    def _lost(self, what: str, exc: BaseException) -> ConnectionError:
        """psyq's ConnectionError for a call that lost its connection: the next calls are
        paced, and on a cluster they read the slot map again first (a node may be gone)."""
        self._reconnect.failed()
        self._slots_stale = self.cluster
        return ConnectionError(self.url, f"{what}: {exc or type(exc).__name__}")

    async def _paced(self) -> None:
        """What a call waits for first: the backoff while the server does not answer, and
        on a cluster a slot map read again after a lost connection."""
        if self._reconnect.failures:
            await self._reconnect.wait()
        if self._slots_stale:
            await self._refresh_slots()

    async def _refresh_slots(self) -> None:
        """Read a cluster's slot map again, from any node that answers: after a failover
        the replica that took over serves the slots of the primary that died, and a call
        that goes on using the old map reaches only the dead node (issue 39). redis-py
        does this for plain commands; its pipelines (psyq's scripts) and a transaction
        sent on a node's connection need it done here."""
        self._slots_stale = False
        try:
            await self.client.nodes_manager.initialize()
            if isinstance(self._wire, ClusterWire):
                await self._wire.refresh()
        except (RedisError, RedisClusterException, OSError) as exc:
            raise self._lost("reading the cluster's slot map", exc) from exc

    async def _run_code(
        self, name: str, queue: str, job_id: str, operation: str, *args: Any
    ) -> int:
        code = int(await self._run(name, queue, job_id, *args))
        raise_for_code(code, queue, job_id, operation)
        return code


def _lean_wire(url: str, cluster: bool, plain: bool) -> WireScripts | ClusterWire | None:
    """The lean path for script calls on `url` (see wire.py), when its options allow."""
    address = wire_address(url) if plain else None
    if address is None:
        return None
    return ClusterWire(address) if cluster else WireScripts(address)


def _first_error(replies: list[Any]) -> Exception | None:
    """The first error reply among `replies`, if any. The types are gathered in C first
    (an export page has thousands of replies, of two or three types): a test per reply
    in Python cost ~350 instructions each."""
    if not any(issubclass(kind, Exception) for kind in set(map(type, replies))):
        return None
    return next(reply for reply in replies if isinstance(reply, Exception))


async def _client_transaction(client: Any, queue_key: str, framed: bytes, count: int) -> list[Any]:
    """`framed` (MULTI, `count` packed commands, EXEC) on one redis-py connection (a cluster
    node's: the one holding the queue's slot); EXEC's replies. The lean path is `WireScripts`."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(queue_key)
        if node is None:
            raise RedisClusterException(f"no cluster node holds the slot of {queue_key!r}")
        conn = node.acquire_connection()
        try:
            return await _exec_on(conn, framed, count)
        finally:
            node.release(conn)
    pool = client.connection_pool
    conn = await pooled_connection(pool, "MULTI")
    try:
        return await _exec_on(conn, framed, count)
    finally:
        await pool.release(conn)


async def _exec_on(conn: Any, framed: bytes, count: int) -> list[Any]:
    try:
        await conn.send_packed_command(framed, check_health=False)
        for _ in range(count + 1):  # MULTI's OK, then one QUEUED per command
            with contextlib.suppress(ResponseError):  # a refused command: EXEC aborts
                await conn.read_response()
        replies: list[Any] = await conn.read_response()
        return replies
    except ResponseError:  # EXECABORT: the connection is fine
        raise
    except BaseException:
        await conn.disconnect()
        raise


async def _close_clients(clients: list[Any]) -> None:
    """Close every client, even when closing one fails (the first failure is raised after)."""
    failures = await asyncio.gather(*(_close_client(c) for c in clients), return_exceptions=True)
    for failure in failures:
        if isinstance(failure, BaseException):
            raise failure


async def _close_client(client: Any) -> None:
    if isinstance(getattr(client, "connection_pool", None), SentinelConnectionPool):
        await close_sentinel_client(client)  # its connections to the Sentinels too
        return
    await client.aclose()
    if isinstance(client, RedisCluster):
        # aclose() skips a cluster client that a lost connection marked for a new slot map
        # (its nodes still hold connections): disconnect its nodes anyway.
        await client.nodes_manager.aclose()
        await client.nodes_manager.aclose("startup_nodes")


async def _maxmemory_policy(client: Any) -> str | None:
    """The server's maxmemory-policy, or None where CONFIG is not allowed (managed Redis)."""
    try:
        policy: dict[str, str] = await client.config_get("maxmemory-policy")
    except ResponseError:
        return None
    return policy.get("maxmemory-policy")


async def _cancelled(tasks: set[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _drop_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it
