"""The contract's Transfer group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.contract.shapes import (
    QueueMeta,
)
from psyq.backends.records import (
    ExportPage,
)

__all__ = ["Transfer"]


class Transfer(AdapterRoot):
    """Export and import: what migration and the Spark pipeline use, and nothing else."""

    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        """Up to `limit` jobs of every state, in line order (waiting as they would be taken,
        prioritized, delayed by due time, active, waiting-children, completed and failed by
        finish time). Start with `cursor=None`, then pass each page's `next_cursor`."""
        raise self._unsupported("export")

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        """Write exported jobs idempotently by id, in their states (active ones arrive as
        waiting), without events; returns how many were written. A job already there with
        the same name, data and timestamp is skipped; a different job under the same id
        makes the whole page fail (nothing written) unless `overwrite`."""
        raise self._unsupported("import")

    async def get_queue_meta(self, queue: str) -> QueueMeta:
        """Paused flag, id counter, limits, schedulers, dedup keys: what migration moves
        besides jobs, as JSON values (the keys: `QueueMeta`)."""
        raise self._unsupported("queue metadata")

    async def set_queue_meta(self, queue: str, meta: QueueMeta) -> None:
        """Apply what `get_queue_meta` gave (the id counter only moves up)."""
        raise self._unsupported("queue metadata")
