"""Rows of the `jobs` table as `JobRecord`s, and small decoders."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from psyq.backends.base import JobRecord

__all__ = ["to_record"]


def to_record(row: asyncpg.Record) -> JobRecord:
    qkey: str = row["qkey"]
    return JobRecord(
        id=row["id"],
        queue=qkey.split(":", 1)[1],
        name=row["name"],
        data=row["data"],
        opts=json.loads(row["opts"]),
        timestamp=row["timestamp"],
        delay=row["delay"],
        priority=row["priority"],
        progress=json.loads(row["progress"]),
        attempts_made=row["attempts_made"],
        attempts_started=row["attempts_started"],
        stalled_counter=row["stalled_counter"],
        processed_on=row["processed_on"],
        finished_on=row["finished_on"],
        returnvalue=row["returnvalue"],
        failed_reason=row["failed_reason"],
        stacktrace=json.loads(row["stacktrace"]),
        parent_key=row["parent_key"],
        processed_by=row["processed_by"],
        lock_token=row["lock_token"] if row["state"] == "active" else None,
        state=row["state"],
    )


def opts_of(row: asyncpg.Record) -> dict[str, Any]:
    opts: dict[str, Any] = json.loads(row["opts"])
    return opts
