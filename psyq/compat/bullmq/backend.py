"""`create_backend`: what the `bullmq` package calls a queue's backend, here a psyq core
`Queue` on the URL its options name, with the few handles `bullmq` code reads directly
(`keys`, `qualifiedName`, `clientName`, the Redis client when the store is Redis)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from psyq.backends.base import BackendAdapter, JobRecord
from psyq.compat.bullmq._core import CoreFlowProducer, CoreQueue
from psyq.compat.bullmq.connection import store_url
from psyq.core.flow import JobNode
from psyq.core.job import QueueRef
from psyq.errors import PsyqError
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = [
    "KEY_NAMES",
    "Backend",
    "QueueView",
    "create_backend",
    "is_redis",
    "qualified_name",
    "redis_client",
    "redis_keys",
    "store_of",
]

KEY_NAMES = (
    "wait",
    "paused",
    "meta",
    "id",
    "active",
    "delayed",
    "prioritized",
    "completed",
    "failed",
    "stalled",
    "limiter",
    "events",
    "marker",
    "pc",
    "repeat",
    "de",
    "metrics",
)


class Backend:
    """One queue's store: a core Queue opened on first use, shared with the Workers,
    QueueEvents and FlowProducers of the same URL in this event loop."""

    def __init__(self, name: str, opts: Mapping[str, Any]) -> None:
        self.name = name
        self.prefix = str(opts.get("prefix") or DEFAULT_PREFIX)
        self.url = store_url(opts)
        self.core = CoreQueue(
            name,
            self.url,
            prefix=self.prefix,
            default_job_options=opts.get("defaultJobOptions") or None,
        )
        self.keys = redis_keys(self.prefix, name)
        self.capabilities = {"canDoubleTimeout": True, "canBlockFor1Ms": True}
        self.minimumBlockTimeout = 0.001

    @property
    def qualifiedName(self) -> str:
        """The queue as job keys name it (a `parent` option's `queue`): `<prefix>:<queue>`,
        or `<queue>` on a store without key prefixes (Postgres, as BullMQ 6 names it there),
        asked of the store once it is open; before that, the prefixed form."""
        return qualified_name(self.core._backend, self.prefix, self.name)

    @property
    def is_redis(self) -> bool:
        return is_redis(self.url)

    def toKey(self, type: str) -> str:
        return f"{self.qualifiedName}:{type}"

    def clientName(self, suffix: str | None = None) -> str:
        return f"{self.qualifiedName}{suffix or ''}"

    def ref(self) -> QueueRef:
        """What a core Job needs of its queue (the store must be open)."""
        adapter = self.core._backend
        if adapter is None:
            raise PsyqError(f"queue {self.name!r} is not open yet")
        return QueueRef(self.name, adapter)

    async def adapter(self) -> BackendAdapter:
        return await self.core._open()

    @property
    def conn(self) -> Any:
        """The redis-py client of an opened Redis store (else None)."""
        return redis_client(self.core._backend, self.url)

    @property
    def connection(self) -> Any:
        return self.conn

    async def open(self) -> Any:
        """Open the store; returns its redis-py client on Redis, else None."""
        await self.adapter()
        return self.conn

    async def waitForJob(self, timeout: float) -> None:
        """Block up to `timeout` seconds for a job to become ready."""
        adapter = await self.adapter()
        await adapter.wait_for_job(self.name, max(1, int(timeout * 1000)))

    async def getJobData(self, job_id: str) -> JobRecord | None:
        adapter = await self.adapter()
        return await adapter.get_job(self.name, str(job_id))

    async def close(self, force: bool = False) -> None:
        await self.core.close()

    disconnect = close

    # flows: what a FlowProducer asks of its backend, as in `bullmq` (one kind of backend)
    def forQueue(self, queue_name: str, prefix: str | None = None) -> QueueView:
        return QueueView(queue_name, prefix or self.prefix, self)

    async def addFlow(self, flows: Sequence[Mapping[str, Any]]) -> list[JobNode]:
        """Add the trees `flows` (core flow specs) atomically."""
        producer = CoreFlowProducer(await self.adapter(), prefix=self.prefix)
        return await producer.add_bulk(flows)

    async def parent_exists(self, flow: Mapping[str, Any]) -> bool:
        """False when the root names a parent job (`opts.parent`) that does not exist."""
        parent = (flow.get("opts") or {}).get("parent")
        if not parent:
            return True
        queue = str(parent.get("queue", "")).rpartition(":")[2]  # `[<prefix>:]<queue>`
        adapter = await self.adapter()
        return await adapter.get_job(queue, str(parent.get("id"))) is not None


class QueueView:
    """What a flow's Job needs of its queue: its name, prefix and the producer's store."""

    def __init__(self, name: str, prefix: str, backend: Backend) -> None:
        self.name = name
        self.prefix = prefix
        self.backend = backend
        self.opts: dict[str, Any] = {}

    @property
    def qualifiedName(self) -> str:
        """As the store names the queue in job keys, once the producer's store is open."""
        return qualified_name(self.backend.core._backend, self.prefix, self.name)


def redis_keys(prefix: str, name: str) -> dict[str, str]:
    """Redis's key names of queue `name` (`bull:<queue>:wait`, ...), for code that reads
    Redis itself."""
    keys = {key: f"{prefix}:{name}:{key}" for key in KEY_NAMES}
    keys[""] = f"{prefix}:{name}:"
    return keys


def is_redis(url: str) -> bool:
    return urlsplit(url).scheme.lower().startswith("redis")


def redis_client(adapter: BackendAdapter | None, url: str) -> Any:
    """The redis-py client of an open Redis store's adapter, else None."""
    if adapter is None or not is_redis(url):
        return None
    return getattr(adapter, "_client", None)


def qualified_name(adapter: BackendAdapter | None, prefix: str, name: str) -> str:
    """`<prefix>:<name>` (the options' prefix), or the bare name where the open store names
    jobs without a prefix (`BackendAdapter.key_prefix` is None)."""
    if adapter is not None and adapter.key_prefix is None:
        return adapter.queue_key(name)
    return f"{prefix}:{name}"


def create_backend(
    name: str,
    opts: Mapping[str, Any] | None = None,
    blocking: bool = False,
    with_blocking_connection: bool = False,
) -> Backend:
    """The store of queue `name` that `opts` (`connection`, `prefix`) describe."""
    return Backend(name, opts or {})


def store_of(backend: Any, opts: Mapping[str, Any]) -> str:
    """The URL of the store a backend stands for: its own (code may replace the factory, as
    `bullmq`'s tests do to put every queue on Postgres), else (a backend of another kind)
    the one `opts` name."""
    url = getattr(backend, "url", None)
    return url if isinstance(url, str) else store_url(opts)
