"""Counting and checksumming a queue's jobs per state, and comparing two backends.

A checksum is the sum, modulo 2**64, of a 64-bit BLAKE2b hash of every job id of a state: it
does not depend on order, and a missing, extra or moved job changes it. Active and paused
jobs count as waiting (an import brings active jobs back as waiting; a paused queue's
waiting jobs report as paused).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from psyq.backends.base import JobRecord
from psyq_migrate.reading import export_pages
from psyq_migrate.sources import ExportSource

__all__ = [
    "COMPARED_STATES",
    "StateSummary",
    "VerifyReport",
    "VerifyRow",
    "compare",
    "find_conflict",
    "id_hash",
    "summarize",
]

COMPARED_STATES = ("waiting", "prioritized", "delayed", "waiting-children", "completed", "failed")
_AS_WAITING = frozenset({"waiting", "paused", "active"})
_MASK = (1 << 64) - 1


def id_hash(job_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=8).digest(), "big")


def compared_state(state: str | None) -> str:
    return "waiting" if state in _AS_WAITING else str(state)


@dataclass
class StateSummary:
    count: int = 0
    checksum: int = 0

    def add(self, job_id: str) -> None:
        self.count += 1
        self.checksum = (self.checksum + id_hash(job_id)) & _MASK


def summarize_records(records: Iterable[JobRecord]) -> dict[str, StateSummary]:
    summary = {state: StateSummary() for state in COMPARED_STATES}
    for record in records:
        summary.setdefault(compared_state(record.state), StateSummary()).add(record.id)
    return summary


async def summarize(backend: ExportSource, queue: str, limit: int) -> dict[str, StateSummary]:
    """Per state: how many jobs `queue` holds and the checksum of their ids."""
    summary = summarize_records(())
    async for page in export_pages(backend, queue, limit):
        for state, part in summarize_records(page.jobs).items():
            into = summary.setdefault(state, StateSummary())
            into.count += part.count
            into.checksum = (into.checksum + part.checksum) & _MASK
    return summary


@dataclass(frozen=True)
class VerifyRow:
    queue: str
    state: str
    source: StateSummary
    destination: StateSummary

    @property
    def ok(self) -> bool:
        return self.source == self.destination


@dataclass
class VerifyReport:
    rows: list[VerifyRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    @property
    def differences(self) -> list[VerifyRow]:
        return [row for row in self.rows if not row.ok]


async def compare(
    source: ExportSource, destination: ExportSource, queues: Iterable[str], limit: int
) -> VerifyReport:
    """Source and destination summaries of every queue, state by state."""
    report = VerifyReport()
    for queue in queues:
        before = await summarize(source, queue, limit)
        after = await summarize(destination, queue, limit)
        for state in sorted(set(before) | set(after), key=_state_order):
            report.rows.append(
                VerifyRow(
                    queue,
                    state,
                    before.get(state, StateSummary()),
                    after.get(state, StateSummary()),
                )
            )
    return report


def _state_order(state: str) -> tuple[int, str]:
    known = COMPARED_STATES.index(state) if state in COMPARED_STATES else len(COMPARED_STATES)
    return known, state


def fingerprint(record: JobRecord) -> int:
    """What import_jobs compares to tell the same job from a different one under its id."""
    text = f"{record.name}\x00{canonical_json(record.data)}\x00{record.timestamp}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def canonical_json(text: str) -> str:
    """One text for equal JSON values: Postgres keeps job data as jsonb, which spaces,
    orders keys and writes numbers its own way (`1e3` as `1000`, `1.0` as `1.0`)."""
    try:
        value = json.loads(text, parse_float=_number, parse_int=_number)
    except ValueError:
        return text
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _number(text: str) -> Decimal:
    return Decimal(text).normalize()


async def find_conflict(
    source: ExportSource, destination: ExportSource, queue: str, limit: int
) -> str | None:
    """The first job id that `destination` holds as a different job than `source`, if any
    (reads the destination's ids first: 8 bytes per job)."""
    held: dict[str, int] = {}
    async for page in export_pages(destination, queue, limit):
        held.update((record.id, fingerprint(record)) for record in page.jobs)
    if not held:
        return None
    async for page in export_pages(source, queue, limit):
        for record in page.jobs:
            mark = held.get(record.id)
            if mark is not None and mark != fingerprint(record):
                return record.id
    return None
