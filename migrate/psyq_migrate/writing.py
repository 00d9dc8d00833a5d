"""The Spark task's side: import a partition's batches through the destination adapter.

Runs in a Spark Python worker. It opens the destination, imports every batch in order
(idempotent by job id), closes it (a SQLite destination flushes and releases its lock before
the task ends) and returns one result per batch. Errors come back as results rather than
exceptions, so the driver can name them instead of showing a JVM stack trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from psyq.backends import open_backend, release_backend
from psyq.errors import PsyqError
from psyq_migrate.reading import Batch

__all__ = ["BatchResult", "import_batches", "write_partition"]


class BatchResult(NamedTuple):
    queue: str
    jobs: int  # jobs in the batch
    written: int  # jobs the destination did not hold yet
    error: str | None = None


def write_partition(
    destination: str, overwrite: bool, slices: Iterable[list[Batch]]
) -> Iterator[BatchResult]:
    """mapPartitions body: every batch of every slice of this partition, in order."""
    batches = [batch for slice_ in slices for batch in slice_]
    if not batches:
        return iter(())
    return iter(asyncio.run(import_batches(destination, overwrite, batches)))


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
