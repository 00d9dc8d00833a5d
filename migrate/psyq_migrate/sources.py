"""Opening a backend only to read it: what the plan, the export and `--verify` need.

A SQLite file is read straight from its tables (`psyq.backends.sqlite.SqliteExport`): no rebuild
of the engine (about 6 s per million jobs) before the first page. The driver owns the
file while it reads (its lock keeps writers out); Spark tasks read beside it (`shared`),
read-only. Every other backend (and a SQLite file this process already has open through the
engine, whose memory may hold changes not yet written) is opened as usual.

A Redis source is planned with ONE walk of the keyspace (`transfer.scan_queues`): queue
names and every queue's deduplication keys at once, where `list_queues` and each queue's
metadata would walk it once per key kind and once per queue.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from psyq.backends import open_backend, release_backend
from psyq.backends.base import BackendAdapter, ExportPage, QueueMeta
from psyq.backends.sqlite import SqliteExport, is_open_here
from psyq_migrate.endpoints import scheme, sqlite_path

if TYPE_CHECKING:
    from psyq.backends.redis import QueueScan, RedisBackend

__all__ = ["ExportSource", "RedisSource", "open_source", "release_source"]


class ExportSource(Protocol):
    """What reading a backend for migration uses (a BackendAdapter is one)."""

    async def list_queues(self) -> list[str]: ...

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]: ...

    async def get_queue_meta(self, queue: str) -> QueueMeta: ...

    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage: ...


async def open_source(url: str, shared: bool = False) -> ExportSource:
    """`url` opened for reading; `shared`: beside the process that owns a SQLite file."""
    path = sqlite_path(url)
    if path is not None and not is_open_here(path) and os.path.exists(path):
        reader = SqliteExport(url, own=not shared)
        await reader.open()
        return reader
    backend = await open_backend(url)
    if scheme(url) in ("redis", "rediss"):
        from psyq.backends.redis import RedisBackend  # an optional dependency

        if isinstance(backend, RedisBackend):
            return RedisSource(backend)
    return backend


async def release_source(source: ExportSource) -> None:
    if isinstance(source, SqliteExport):
        await source.close()
    elif isinstance(source, RedisSource):
        await release_backend(source.backend)
    elif isinstance(source, BackendAdapter):
        await release_backend(source)


class RedisSource:
    """A Redis backend read for migration, its queues and dedup keys found in one SCAN."""

    def __init__(self, backend: RedisBackend) -> None:
        self.backend = backend
        self._scan: QueueScan | None = None

    async def _scanned(self) -> QueueScan:
        from psyq.backends.redis import scan_queues

        if self._scan is None:
            self._scan = await scan_queues(self.backend)
        return self._scan

    async def list_queues(self) -> list[str]:
        return sorted((await self._scanned()).names)

    async def get_queue_meta(self, queue: str) -> QueueMeta:
        from psyq.backends.redis import get_queue_meta

        dedup_ids = (await self._scanned()).dedup.get(queue, [])
        return await get_queue_meta(self.backend, queue, dedup_ids)

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]:
        return await self.backend.get_job_counts(queue, states)

    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        return await self.backend.export_jobs(queue, cursor, limit)
