"""`Batch`: what one flush writes, the statements that write it, in order, and `merge`, one
batch out of several (a failed flush's rows, kept, with the next flush's)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from psyq.backends.engine.store import QueueStore
from psyq.backends.sqlite import rows
from psyq.backends.sqlite.ids import RESERVE

__all__ = ["BIND_ERRORS", "Batch", "merge", "statements", "write_all"]


@dataclass
class Batch:
    """What one flush writes."""

    upserts: list[tuple[Any, ...]] = field(default_factory=list)
    deletes: list[tuple[str, str]] = field(default_factory=list)
    metas: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    trims: list[tuple[str, int]] = field(default_factory=list)
    drops: list[tuple[str]] = field(default_factory=list)  # obliterated queues
    marks: list[tuple[str, int]] = field(default_factory=list)  # (queue key, ids reserved)
    raised: list[tuple[QueueStore, int]] = field(default_factory=list)  # once committed
    ticket: int = 0

    def __bool__(self) -> bool:
        parts = (self.upserts, self.deletes, self.metas, self.events, self.trims, self.drops)
        return any(parts) or bool(self.marks)


# Errors of binding one row's values (not of the database): they concern that row alone.
BIND_ERRORS = (
    UnicodeError, OverflowError, ValueError, TypeError, sqlite3.InterfaceError,
    sqlite3.ProgrammingError,
)  # fmt: skip


def write_all(conn: sqlite3.Connection, statement: str, params: Any) -> None:
    conn.executemany(statement, params)


def statements(batch: Batch) -> list[tuple[str, Sequence[Any]]]:
    """What a batch writes, in order: dropped queues first, then rows."""
    return [
        ("DELETE FROM jobs WHERE queue = ?", batch.drops),
        ("DELETE FROM queues WHERE key = ?", batch.drops),
        ("DELETE FROM events WHERE queue = ?", batch.drops),
        (rows.UPSERT_JOB, batch.upserts),
        ("DELETE FROM jobs WHERE queue = ? AND id = ?", batch.deletes),
        ("INSERT OR REPLACE INTO queues VALUES (?, ?)", batch.metas),
        ("INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?)", batch.events),
        ("DELETE FROM events WHERE queue = ? AND last_seq < ?", batch.trims),
        (RESERVE, batch.marks),
    ]


def merge(batches: Sequence[Batch | None]) -> Batch:
    """One batch writing what `batches` write in turn. A batch writes its drops, then its
    upserts, then its deletes, so what a later batch changes is taken out of the earlier
    ones first (a job deleted and added again, a queue obliterated after its writes)."""
    merged = Batch()
    for batch in batches:
        if batch is None:
            continue
        dropped = {key for (key,) in batch.drops}
        upserted = {(row[0], row[1]) for row in batch.upserts}
        deleted = set(batch.deletes)
        merged.upserts = [
            row for row in merged.upserts
            if row[0] not in dropped and (row[0], row[1]) not in deleted
        ] + batch.upserts  # fmt: skip
        merged.deletes = [
            pair for pair in merged.deletes if pair[0] not in dropped and pair not in upserted
        ] + batch.deletes
        for name in ("metas", "events", "trims", "marks"):
            earlier = [row for row in getattr(merged, name) if row[0] not in dropped]
            setattr(merged, name, earlier + getattr(batch, name))
        merged.drops += batch.drops
        merged.raised += batch.raised
        merged.ticket = max(merged.ticket, batch.ticket)
    return merged
