"""Job history to Parquet (`psyq export`), and rows to jobs (`psyq enqueue`).

Export: the driver reads every queue through `export_jobs` (so a single-owner source works)
and appends one Parquet part per wave of rows into a hidden folder beside `out_dir`, renamed
to `out_dir` at the end: a failed export leaves no half-written folder. An observer is told
each queue's job count, then every page read.

Enqueue: the rows of a DataFrame become jobs through `Queue.add_bulk` (options are validated
and add-side plugins run), one bulk add per batch of rows, in Spark tasks; one task when the
destination has a single owner (a SQLite file). The DataFrame's partitions run in waves (one
Spark job each: as many partitions as Spark has cores; into a single owner, one of at most
ten, in partition order), so an observer is told the rows added after every wave; a file is read in
partitions of at most 16 MiB, so a large file moves its progress bar along.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import JOB_STATES, JobRecord
from psyq.errors import PsyqError
from psyq_migrate.endpoints import (
    absolute_url,
    check_destination,
    check_source,
    is_single_owner,
    sqlite_path,
)
from psyq_migrate.errors import MigrateError
from psyq_migrate.pipeline import Observer, QueuePlan
from psyq_migrate.reading import export_pages
from psyq_migrate.spark import first_line, require_visible, run_partitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "HISTORY_COLUMNS",
    "enqueue_dataframe",
    "enqueue_file",
    "export_history",
    "history_row",
]

HISTORY_COLUMNS = (
    ("id", "string"),
    ("queue", "string"),
    ("name", "string"),
    ("state", "string"),
    ("timestamp", "long"),  # added, ms since the epoch
    ("delay", "long"),
    ("priority", "long"),
    ("processed_on", "long"),  # last attempt started
    ("finished_on", "long"),
    ("attempts_made", "long"),
    ("attempts_started", "long"),
    ("wait_ms", "long"),  # processed_on - (timestamp + delay)
    ("run_ms", "long"),  # finished_on - processed_on
    ("failed_reason", "string"),
)
ROWS_PER_PART = 50_000
SHARED_DISK = (
    "use a folder every Spark worker mounts at the same path, or run with --master local[*]"
)


def history_row(record: JobRecord) -> tuple[Any, ...]:
    """One Parquet row of a job, in HISTORY_COLUMNS order."""
    started, finished = record.processed_on, record.finished_on
    wait = None if started is None else max(0, started - (record.timestamp + record.delay))
    run = None if started is None or finished is None else max(0, finished - started)
    return (
        record.id,
        record.queue,
        record.name,
        record.state,
        record.timestamp,
        record.delay,
        record.priority,
        started,
        finished,
        record.attempts_made,
        record.attempts_started,
        wait,
        run,
        record.failed_reason,
    )


def history_schema() -> StructType:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    kinds = {"string": StringType(), "long": LongType()}
    return StructType([StructField(name, kinds[kind], True) for name, kind in HISTORY_COLUMNS])


def export_history(
    url: str,
    out_dir: str | os.PathLike[str],
    spark: SparkSession,
    queues: Sequence[str] | None = None,
    observer: Observer | None = None,
) -> int:
    """Write every job of `url` (or of `queues`) to Parquet under `out_dir`; returns the count."""
    check_source(url)
    target = Path(out_dir).resolve()  # the JVM's working folder may differ from ours
    if target.exists():
        raise MigrateError(f"{str(target)!r} already exists; export into a new folder")
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
    require_visible(
        spark, {str(target.parent): (f"Spark tasks write {str(target)!r}", SHARED_DISK)}
    )
    try:
        written = asyncio.run(_export(url, staging, spark, queues, observer))
        if written == 0:
            spark.createDataFrame([], history_schema()).write.parquet(str(staging))
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


async def _export(
    url: str,
    staging: Path,
    spark: SparkSession,
    queues: Sequence[str] | None,
    observer: Observer | None,
) -> int:
    backend = await open_backend(url)
    try:
        names = list(queues) if queues is not None else await backend.list_queues()
        if observer is not None:
            counts = [await backend.get_job_counts(name, list(JOB_STATES)) for name in names]
            observer.planned(
                [QueuePlan(name, n, {}) for name, n in zip(names, counts, strict=True)]
            )
        written = 0
        rows: list[tuple[Any, ...]] = []
        for name in names:
            async for page in export_pages(backend, name, 1000):
                if observer is not None:
                    observer.moved(name, len(page.jobs))
                rows.extend(history_row(record) for record in page.jobs)
                if len(rows) >= ROWS_PER_PART:
                    written += _append(spark, staging, rows)
                    rows = []
        return written + (_append(spark, staging, rows) if rows else 0)
    finally:
        await release_backend(backend)


def _append(spark: SparkSession, staging: Path, rows: list[tuple[Any, ...]]) -> int:
    frame = spark.createDataFrame(rows, history_schema())
    try:
        frame.coalesce(1).write.mode("append").parquet(str(staging))
    except Exception as exc:  # py4j / Spark errors carry a JVM trace: keep the first line
        raise MigrateError(
            f"writing Parquet into {str(staging)!r} failed: {first_line(exc)}"
        ) from None
    return len(rows)


# ---------------------------------------------------------------------- enqueue
JOB_COLUMNS = frozenset({"name", "data", "id", "opts"})
ROWS_PER_ADD = 500
PART_BYTES = 16 * 1024 * 1024  # of a file, per task (and per step of the progress bar)
# Tasks into a single owner (a SQLite file), one after another: each opens the file, which
# rebuilds its memory from disk (~6 s per million jobs), so they are few.
SINGLE_OWNER_WAVES = 10


def enqueue_dataframe(
    frame: DataFrame,
    url: str,
    queue: str,
    name: str | None = None,
    partitions: int | None = None,
    observer: Observer | None = None,
) -> int:
    """Add every row of `frame` as a job of `queue` on `url`; returns how many were added.

    Columns: `name` (or pass `name`), optional `id` (the job id: a rerun skips rows already
    added), optional `opts` (JSON text of job options), and `data` (JSON text) or, without a
    `data` column, every other column as a field of the job's data."""
    check_destination(url)
    url = absolute_url(url)  # a task's working folder is not ours
    path = sqlite_path(url)
    if path is not None:
        what = f"the destination {url!r} is a file Spark tasks write"
        require_visible(frame.sparkSession, {os.path.dirname(path): (what, SHARED_DISK)})
    if name is None and "name" not in frame.columns:
        raise MigrateError(f"the rows have no 'name' column ({frame.columns}); pass a job name")
    single = is_single_owner(url)
    if single and frame.rdd.getNumPartitions() > SINGLE_OWNER_WAVES:
        frame = frame.coalesce(SINGLE_OWNER_WAVES)  # neighbours merged: the order is kept
    elif partitions is not None and not single:
        frame = frame.repartition(partitions)
    if observer is not None:
        observer.planned([QueuePlan(queue, {"rows": frame.count()}, {})])
    task = functools.partial(_enqueue_partition, url, queue, name)
    rdd = frame.rdd.mapPartitions(task)
    wave = 1 if single else frame.sparkSession.sparkContext.defaultParallelism
    parts = rdd.getNumPartitions()
    added = 0
    for start in range(0, parts, wave):
        chunk = list(range(start, min(start + wave, parts)))
        outcomes: list[tuple[int, str | None]] = run_partitions(rdd, chunk, "enqueue")
        failed = next((error for _, error in outcomes if error), None)
        now = sum(count for count, _ in outcomes)
        added += now
        if failed is not None:
            raise MigrateError(f"enqueueing into {queue!r} stopped after {added} jobs: {failed}")
        if observer is not None:
            observer.moved(queue, now)
    return added


def enqueue_file(
    path: str | os.PathLike[str],
    url: str,
    queue: str,
    spark: SparkSession,
    name: str | None = None,
    observer: Observer | None = None,
) -> int:
    """Add every row of a Parquet or CSV file (with a header row) as a job."""
    source = Path(path).resolve()  # the JVM's working folder may differ from ours
    if not source.exists():
        raise MigrateError(f"no such file: {str(source)!r}")
    kind = source.suffix.lower()
    if kind not in (".parquet", ".csv"):
        raise MigrateError(f"cannot read {str(source)!r}: expected a .parquet or .csv file")
    what = f"Spark tasks read {str(source)!r}"
    require_visible(spark, {str(source.parent): (what, SHARED_DISK)})
    reader = spark.read.option("maxPartitionBytes", PART_BYTES)
    try:
        if kind == ".parquet":
            frame = reader.parquet(str(source))
        else:
            frame = reader.csv(str(source), header=True, inferSchema=True)
    except Exception as exc:  # Spark errors carry a JVM trace: keep the gist
        raise MigrateError(f"cannot read {str(source)!r}: {first_line(exc)}") from None
    return enqueue_dataframe(frame, url, queue, name, observer=observer)


def _enqueue_partition(
    url: str, queue: str, name: str | None, rows: Iterable[Row]
) -> Iterator[tuple[int, str | None]]:
    entries = [job_entry(row.asDict(recursive=True), name) for row in rows]
    if not entries:
        return iter(())
    return iter([asyncio.run(_add_all(url, queue, entries))])


def job_entry(row: dict[str, Any], name: str | None) -> dict[str, Any]:
    """An add_bulk entry from a row (see enqueue_dataframe for the columns)."""
    opts = json.loads(row["opts"]) if row.get("opts") else {}
    if row.get("id") is not None:
        opts["job_id"] = str(row["id"])
    if "data" in row:
        data = json.loads(row["data"]) if row["data"] is not None else None
    else:
        fields = {key: value for key, value in row.items() if key not in JOB_COLUMNS}
        data = json.loads(json.dumps(fields, default=str))  # dates and decimals as text
    return {"name": row.get("name") or name, "data": data, "opts": opts}


async def _add_all(url: str, queue: str, entries: list[dict[str, Any]]) -> tuple[int, str | None]:
    added = 0
    try:
        async with psyq.Queue(queue, connection=url) as target:
            for start in range(0, len(entries), ROWS_PER_ADD):
                batch = entries[start : start + ROWS_PER_ADD]
                await target.add_bulk(batch)
                added += len(batch)
    except (PsyqError, ValueError) as exc:
        return added, str(exc)
    return added, None
