"""Reading a source through `export_jobs`, in the process that holds its export cursors.

The engine keeps an export's snapshot in the backend object that started it, so every
page of a queue is read through the same opened backend, on the same event loop (the driver
keeps one `asyncio.Runner` for the whole run).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from psyq.backends.base import ExportPage, JobRecord
from psyq_migrate.sources import ExportSource

__all__ = [
    "Batch",
    "PackedBatch",
    "QueueReader",
    "WaveReader",
    "export_pages",
    "export_pages_ahead",
    "pack",
    "unpack",
]

# (queue name, one export page): the unit a Spark task imports.
Batch = tuple[str, ExportPage]

# A batch as the driver hands it to Spark: records as tuples of their fields in constructor
# order, beside the page's logs, due times, flow links and the form of its job keys. Spark
# pickles what it sends to its tasks; plain tuples pickle and unpickle about twice as fast
# as dataclass records (this is Spark's transport only: nothing stores it).
PackedBatch = tuple[
    str,
    list[tuple[Any, ...]],
    dict[str, list[str]],
    dict[str, int],
    dict[str, dict[str, Any]],
    str | None,
]
_RECORD_FIELDS = attrgetter(*(item.name for item in fields(JobRecord)))


def pack(batch: Batch) -> PackedBatch:
    queue, page = batch
    rows = [_RECORD_FIELDS(job) for job in page.jobs]
    return queue, rows, page.logs, page.due, page.deps, page.key_prefix


def unpack(packed: PackedBatch) -> Batch:
    queue, rows, logs, due, deps, keys = packed
    return queue, ExportPage([JobRecord(*row) for row in rows], logs, None, due, deps, keys)


async def export_pages(backend: ExportSource, queue: str, limit: int) -> AsyncIterator[ExportPage]:
    """Every page of one export of `queue`."""
    cursor: str | None = None
    while True:
        page = await backend.export_jobs(queue, cursor, limit)
        yield page
        cursor = page.next_cursor
        if cursor is None:
            return


async def export_pages_ahead(
    backend: ExportSource, queue: str, limit: int
) -> AsyncIterator[ExportPage]:
    """`export_pages`, asking for the next page before handing out the current one, so a
    server source prepares it while the caller imports (one page ahead, never more)."""
    ahead = asyncio.ensure_future(backend.export_jobs(queue, None, limit))
    try:
        while True:
            page = await ahead
            if page.next_cursor is not None:
                ahead = asyncio.ensure_future(backend.export_jobs(queue, page.next_cursor, limit))
            yield page
            if page.next_cursor is None:
                return
    finally:
        if not ahead.done():
            ahead.cancel()


@dataclass
class QueueReader:
    """One queue's export, page by page."""

    backend: ExportSource
    queue: str
    limit: int
    cursor: str | None = None
    done: bool = False

    async def next_page(self) -> ExportPage:
        page = await self.backend.export_jobs(self.queue, self.cursor, self.limit)
        self.cursor = page.next_cursor
        self.done = page.next_cursor is None
        return page


@dataclass
class WaveReader:
    """Reads the source in waves: up to `readers` queues at once, up to `pages` pages of each
    per wave. A wave is a list of slices, one per queue being read, pages in line order, so a
    task that imports a slice keeps the queue's order (and waves run one after another)."""

    backend: ExportSource
    queues: Sequence[str]
    limit: int
    readers: int
    pages: int
    _waiting: deque[str] = field(init=False)
    _active: list[QueueReader] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._waiting = deque(self.queues)

    async def next_wave(self) -> list[list[Batch]]:
        """The next wave (empty when the source is exhausted)."""
        while self._waiting and len(self._active) < self.readers:
            queue = self._waiting.popleft()
            self._active.append(QueueReader(self.backend, queue, self.limit))
        wave = [await self._read_slice(reader) for reader in self._active]
        self._active = [reader for reader in self._active if not reader.done]
        return [batches for batches in wave if batches]

    async def _read_slice(self, reader: QueueReader) -> list[Batch]:
        batches: list[Batch] = []
        while not reader.done and len(batches) < self.pages:
            page = await reader.next_page()
            if page.jobs:
                batches.append((reader.queue, page))
        return batches
