"""The live move's journal: a small SQLite file the mover owns, so a move killed at any point
and run again leaves exactly one copy of every job.

Each move of a job (or a scheduler) is written here, committed, before it is removed from
the source; it is marked done once the destination holds it. A restart first settles the
entries not marked: an entry whose job the source still holds was never removed (the normal
pass moves it again); one the source lost is imported into the destination (an import skips
an id the destination already holds) unless a receipt says the destination had it. Records
are JSON, never pickled.

Receipts: each import into the destination carries one more job, a finished one no worker
takes, named from this journal's `token` and the first entry of the import (`receipt_id`),
whose data lists the entries it brought. A page is imported whole or not at all, so the
receipt is there exactly when the jobs were: a rerun that finds an unmarked entry neither
in the source nor in the destination (the destination's workers ran it and removed it) but
under a receipt knows it arrived, and does not import it again. The mover removes a receipt
once its entries are marked; `receipts` keeps those to remove, in the transaction of the
mark, so a rerun removes any a kill left behind.

Settings (`setting`/`set_setting`) keep what the first run found and must not be read
again after the mover changed it: whether a queue was paused before the move, the floor the
destination's id counter was raised to.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from psyq.backends.base import ExportPage, JobRecord
from psyq.errors import redact_url
from psyq_migrate.errors import MigrateError

__all__ = [
    "RECEIPT_NAME",
    "Entry",
    "Journal",
    "default_journal_path",
    "entry_page",
    "job_payload",
    "receipt_record",
    "receipt_seqs",
]

# An entry's status: written, not yet known to be in the destination; in the destination;
# never removed from the source (left there, moved again later); refused by the destination
# (a different job under its id: kept here, counted, reported).
PENDING, DONE, KEPT, CONFLICT = "pending", "done", "kept", "conflict"

SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS moves (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    item TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS moves_pending ON moves (status) WHERE status = 'pending';
CREATE TABLE IF NOT EXISTS receipts (
    queue TEXT NOT NULL,
    id TEXT NOT NULL,
    PRIMARY KEY (queue, id)
);
"""
RECEIPT_NAME = "psyq-live-receipt"


def default_journal_path(source: str, destination: str) -> str:
    """`psyq-live-<source>-to-<destination>-<hash>.journal` in the working folder: the same
    pair of URLs finds the same journal again (the hash tells apart URLs that read alike)."""

    def slug(url: str) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "-", redact_url(url)).strip("-")[:40]

    digest = hashlib.sha256(f"{source}\n{destination}".encode()).hexdigest()[:12]
    return os.path.abspath(f"psyq-live-{slug(source)}-to-{slug(destination)}-{digest}.journal")


@dataclass(frozen=True)
class Entry:
    seq: int
    queue: str
    kind: str  # "job" or "scheduler"
    item: str  # the job id or the scheduler id
    payload: dict[str, Any]


def job_payload(page: ExportPage, job: JobRecord) -> dict[str, Any]:
    """One job of an export page with what travels with it (logs, due time, children)."""
    record = asdict(job)
    record["stacktrace"] = list(job.stacktrace)
    return {
        "job": record,
        "logs": page.logs.get(job.id),
        "due": page.due.get(job.id),
        "deps": page.deps.get(job.id),
        "key_prefix": page.key_prefix,
    }


def entry_page(payloads: Sequence[dict[str, Any]]) -> ExportPage:
    """An export page of journaled jobs (all of one key form, as one source wrote them)."""
    page = ExportPage(jobs=[], logs={}, next_cursor=None)
    for payload in payloads:
        record = dict(payload["job"])
        record["stacktrace"] = tuple(record.get("stacktrace") or ())
        job = JobRecord(**record)
        page.jobs.append(job)
        if payload.get("logs") is not None:
            page.logs[job.id] = list(payload["logs"])
        if payload.get("due") is not None:
            page.due[job.id] = int(payload["due"])
        if payload.get("deps") is not None:
            page.deps[job.id] = payload["deps"]
        page.key_prefix = payload.get("key_prefix")
    return page


def receipt_record(receipt_id: str, queue: str, seqs: Sequence[int], now_ms: int) -> JobRecord:
    """The receipt of an import: a completed job whose data lists the entries it brought."""
    return JobRecord(
        id=receipt_id,
        queue=queue,
        name=RECEIPT_NAME,
        data=json.dumps({"seqs": list(seqs)}),
        opts={},
        timestamp=now_ms,
        processed_on=now_ms,
        finished_on=now_ms,
        returnvalue="null",
        state="completed",
    )


def receipt_seqs(record: JobRecord | None) -> set[int]:
    """The entries a receipt found in the destination brought (none: no receipt)."""
    if record is None or record.name != RECEIPT_NAME:
        return set()
    return {int(seq) for seq in json.loads(record.data).get("seqs", ())}


class Journal:
    """The journal file of one move (see the module docstring)."""

    def __init__(self, path: str, source: str, destination: str) -> None:
        self.path = path
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise MigrateError(f"no folder {folder!r} for the journal {path!r}")
        try:
            self._db = sqlite3.connect(path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise MigrateError(f"cannot open the journal {path!r}: {exc}") from None
        pair = json.dumps([source, destination])
        if self.setting("token") is None:
            self.set_setting("token", secrets.token_hex(6))
        self.token = str(self.setting("token"))
        known = self.setting("pair")
        if known is None:
            self.set_setting("pair", pair)
        elif known != pair:
            self.close()
            theirs = [redact_url(url) for url in json.loads(known)]
            raise MigrateError(
                f"the journal {path!r} belongs to the move {theirs[0]} -> {theirs[1]}, not "
                f"{redact_url(source)} -> {redact_url(destination)}"
            )

    def close(self) -> None:
        self._db.close()

    def setting(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO settings (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def write(
        self, queue: str, kind: str, items: Iterable[tuple[str, dict[str, Any]]]
    ) -> list[int]:
        """Journal moves about to happen, in one committed transaction; their seqs."""
        seqs = []
        with self._transaction():
            for item, payload in items:
                cursor = self._db.execute(
                    "INSERT INTO moves (queue, kind, item, payload, status) VALUES (?, ?, ?, ?, ?)",
                    (queue, kind, item, json.dumps(payload), PENDING),
                )
                seqs.append(int(cursor.lastrowid or 0))
        return seqs

    def receipt_id(self, first_seq: int) -> str:
        """The id of the receipt of an import whose first entry is `first_seq`."""
        return f"{RECEIPT_NAME}-{self.token}-{first_seq}"

    def mark(
        self,
        seqs: Iterable[int],
        status: str,
        receipt: tuple[str, str] | None = None,
        removed: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Mark entries, in one transaction that also notes `receipt` (queue, id) to remove
        from the destination and forgets the receipts already `removed`."""
        with self._transaction():
            self._db.executemany(
                "UPDATE moves SET status = ? WHERE seq = ?", [(status, seq) for seq in seqs]
            )
            if receipt is not None:
                self._db.execute("INSERT OR IGNORE INTO receipts VALUES (?, ?)", receipt)
            self._db.executemany("DELETE FROM receipts WHERE queue = ? AND id = ?", removed)

    def receipts(self) -> list[tuple[str, str]]:
        """Receipts (queue, id) marked and not known to be removed from the destination."""
        rows = self._db.execute("SELECT queue, id FROM receipts ORDER BY queue, id").fetchall()
        return [(str(queue), str(receipt)) for queue, receipt in rows]

    def pending(self) -> list[Entry]:
        rows = self._db.execute(
            "SELECT seq, queue, kind, item, payload FROM moves WHERE status = ? ORDER BY seq",
            (PENDING,),
        ).fetchall()
        return [Entry(row[0], row[1], row[2], row[3], json.loads(row[4])) for row in rows]

    def count(self, status: str, kind: str = "job") -> int:
        row = self._db.execute(
            "SELECT count(*) FROM moves WHERE status = ? AND kind = ?", (status, kind)
        ).fetchone()
        return int(row[0])

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
