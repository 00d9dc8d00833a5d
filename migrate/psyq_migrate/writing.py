"""The Spark task's side: import a partition's batches through the destination adapter.

Runs in a Spark Python worker. It opens the destination, imports every batch in order
(idempotent by job id), closes it (a SQLite destination flushes and releases its lock before
the task ends) and returns one result per batch. Errors come back as results rather than
exceptions, so the driver can name them instead of showing a JVM stack trace.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from psyq.backends import open_backend, release_backend
from psyq.backends.base import BackendAdapter, QueueMeta
from psyq.errors import PsyqError
from psyq_migrate.reading import Batch, PackedBatch, export_pages_ahead, unpack
from psyq_migrate.sources import ExportSource, open_source, release_source

__all__ = ["BatchResult", "copy_partition", "copy_queues", "import_batches", "write_partition"]

T = TypeVar("T")


class BatchResult(NamedTuple):
    queue: str
    jobs: int  # jobs in the batch
    written: int  # jobs the destination did not hold yet
    error: str | None = None


def write_partition(
    destination: str, overwrite: bool, slices: Iterable[list[PackedBatch]]
) -> Iterator[BatchResult]:
    """mapPartitions body: every batch of every slice of this partition, in order (packed by
    the driver, see `reading.pack`)."""
    batches = [unpack(batch) for slice_ in slices for batch in slice_]
    if not batches:
        return iter(())
    return iter(_run(import_batches(destination, overwrite, batches)))


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run a task's copy without the cyclic garbage collector: a page makes thousands of
    short-lived records and lists, freed by their reference counts, and the collector's
    passes over them cost about 6% of the task's CPU. It is back on when the task ends
    (Spark reuses its Python workers)."""
    gc.disable()
    try:
        return asyncio.run(work)
    finally:
        gc.enable()


async def import_batches(
    destination: str, overwrite: bool, batches: list[Batch]
) -> list[BatchResult]:
    try:
        backend = await open_backend(destination)
    except PsyqError as exc:
        return [BatchResult(batches[0][0], 0, 0, f"cannot open the destination: {exc}")]
    results = []
    try:
        for queue, page in batches:
            try:
                written = await backend.import_jobs(queue, page, overwrite)
            except PsyqError as exc:
                results.append(BatchResult(queue, len(page.jobs), 0, str(exc)))
                break  # later batches of this partition are not written
            results.append(BatchResult(queue, len(page.jobs), written))
    finally:
        await release_backend(backend)
    return results


def copy_partition(
    source: str,
    destination: str,
    overwrite: bool,
    batch_size: int,
    metas: Mapping[str, QueueMeta],
    queues: Iterable[str],
) -> Iterator[BatchResult]:
    """mapPartitions body when tasks read: export each queue of the partition from the
    source and import it, page by page, in line order; then set the queue's metadata from
    `metas` (if there), so the driver need not reopen the destination for it."""
    names = list(queues)
    if not names:
        return iter(())
    copied = copy_queues(source, destination, overwrite, batch_size, names, metas)
    return iter(_run(copied))


async def copy_queues(
    source_url: str,
    destination_url: str,
    overwrite: bool,
    batch_size: int,
    queues: list[str],
    metas: Mapping[str, QueueMeta] | None = None,
) -> list[BatchResult]:
    try:
        source = await open_source(source_url, shared=True)  # the driver owns a SQLite file
    except PsyqError as exc:
        return [BatchResult(queues[0], 0, 0, f"cannot open the source: {exc}")]
    try:
        destination = await open_backend(destination_url)
    except PsyqError as exc:
        await release_source(source)
        return [BatchResult(queues[0], 0, 0, f"cannot open the destination: {exc}")]
    try:
        return await _copy(source, destination, overwrite, batch_size, queues, metas or {})
    finally:
        await release_backend(destination)
        await release_source(source)


async def _copy(
    source: ExportSource,
    destination: BackendAdapter,
    overwrite: bool,
    batch_size: int,
    queues: list[str],
    metas: Mapping[str, QueueMeta],
) -> list[BatchResult]:
    results: list[BatchResult] = []
    for queue in queues:
        try:
            async for page in export_pages_ahead(source, queue, batch_size):
                written = await destination.import_jobs(queue, page, overwrite)
                results.append(BatchResult(queue, len(page.jobs), written))
            if queue in metas:  # after the jobs it refers to
                await destination.set_queue_meta(queue, metas[queue])
        except PsyqError as exc:
            results.append(BatchResult(queue, 0, 0, str(exc)))
            break
    return results
