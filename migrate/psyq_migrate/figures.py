"""The figures of `psyq report`, aggregated by Spark SQL from a history export (Parquet);
rendering.py draws them.

Per queue and job name (`build_report`):
- throughput per minute: finished jobs (completed + failed) divided by the minutes between
  the group's first and last finish (at least one minute);
- wait latency (processed_on - due time) and run latency (finished_on - processed_on):
  p50 / p95 / p99, each an observed value (Spark's percentile_approx, exact on small data);
- failure rate: failed / finished; the three most frequent failure reasons.

Over time, per queue (`build_timeline`): the finished jobs are put in intervals of their
finish time (a minute, or longer so a long history stays within about `MAX_POINTS`
intervals); per interval, finished and failed jobs per minute and the wait and run p50 /
p95 / p99 of the jobs that finished in it; and each queue's most frequent failure reasons
with their counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from psyq_migrate.errors import MigrateError
from psyq_migrate.spark import first_line, require_visible

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "GroupFigures",
    "Percentiles",
    "Timeline",
    "TimelinePoint",
    "build_report",
    "build_timeline",
    "choose_interval",
]

QUANTILES = [0.5, 0.95, 0.99]
ACCURACY = 100_000
TOP_REASONS = 3
TIMELINE_REASONS = 10  # per queue, on the chart and the page
MINUTE_MS = 60_000
INTERVALS_MS = [m * MINUTE_MS for m in (1, 5, 15, 60, 360, 1440)]  # up to a day
MAX_POINTS = 240

Percentiles = tuple[int, int, int]  # p50, p95, p99 in ms


@dataclass
class GroupFigures:
    queue: str
    name: str
    jobs: int
    completed: int
    failed: int
    throughput_per_minute: float
    wait_ms: Percentiles | None
    run_ms: Percentiles | None
    top_reasons: list[tuple[str, int]] = field(default_factory=list)

    @property
    def failure_rate(self) -> float | None:
        finished = self.completed + self.failed
        return self.failed / finished if finished else None


def build_report(history_dir: str | os.PathLike[str], spark: SparkSession) -> list[GroupFigures]:
    """Figures per (queue, job name) of the Parquet history under `history_dir`."""
    folder = Path(history_dir).resolve()  # the JVM's working folder may differ from ours
    frame = _read(spark, folder)
    try:
        reasons = _top_reasons(frame)
        rows = _aggregate(frame).orderBy("queue", "name").collect()
    except Exception as exc:  # Spark errors carry a JVM trace: keep the gist
        raise MigrateError(f"cannot report on {str(folder)!r}: {first_line(exc)}") from None
    return [_figures(row.asDict(), reasons.get((row["queue"], row["name"]), [])) for row in rows]


def _read(spark: SparkSession, folder: Path) -> DataFrame:
    if not folder.is_dir():
        raise MigrateError(f"no history folder {str(folder)!r} (write one with psyq export)")
    fix = "use a folder every Spark worker mounts at the same path, or run with --master local[*]"
    require_visible(spark, {str(folder): (f"Spark tasks read the history {str(folder)!r}", fix)})
    # only the Parquet parts: the default chart (report.png) lives in the same folder
    frame = spark.read.option("pathGlobFilter", "*.parquet").parquet(str(folder))
    missing = {"queue", "name", "state", "finished_on", "wait_ms", "run_ms"} - set(frame.columns)
    if missing:
        raise MigrateError(f"{str(folder)!r} is not a psyq history export: no {sorted(missing)}")
    return frame


def _aggregate(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    def count_state(state: str) -> Column:
        return F.sum(F.when(F.col("state") == state, 1).otherwise(0)).alias(state)

    return frame.groupBy("queue", "name").agg(
        F.count("*").alias("jobs"),
        count_state("completed"),
        count_state("failed"),
        F.min("finished_on").alias("first_finish"),
        F.max("finished_on").alias("last_finish"),
        F.percentile_approx("wait_ms", QUANTILES, ACCURACY).alias("wait"),
        F.percentile_approx("run_ms", QUANTILES, ACCURACY).alias("run"),
    )


def _top_reasons(frame: DataFrame) -> dict[tuple[str, str], list[tuple[str, int]]]:
    counted = (
        frame.filter(frame.state == "failed")
        .groupBy("queue", "name", "failed_reason")
        .count()
        .collect()
    )
    reasons: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for row in counted:
        reasons.setdefault((row["queue"], row["name"]), []).append(
            (row["failed_reason"] or "(no reason)", int(row["count"]))
        )
    return {
        key: sorted(found, key=lambda item: (-item[1], item[0]))[:TOP_REASONS]
        for key, found in reasons.items()
    }


def _figures(row: dict[str, object], reasons: list[tuple[str, int]]) -> GroupFigures:
    completed, failed = int(str(row["completed"])), int(str(row["failed"]))
    first, last = row["first_finish"], row["last_finish"]
    minutes = max(1.0, (int(str(last)) - int(str(first))) / 60_000) if first is not None else 1.0
    return GroupFigures(
        queue=str(row["queue"]),
        name=str(row["name"]),
        jobs=int(str(row["jobs"])),
        completed=completed,
        failed=failed,
        throughput_per_minute=(completed + failed) / minutes,
        wait_ms=_percentiles(row["wait"]),
        run_ms=_percentiles(row["run"]),
        top_reasons=reasons,
    )


def _percentiles(values: object) -> Percentiles | None:
    if not isinstance(values, list) or len(values) != len(QUANTILES) or None in values:
        return None
    p50, p95, p99 = (int(value) for value in values)
    return p50, p95, p99


@dataclass(frozen=True)
class TimelinePoint:
    """One interval of one queue: jobs that finished in [start_ms, start_ms + interval)."""

    start_ms: int
    finished: int  # completed + failed
    failed: int
    wait_ms: Percentiles | None
    run_ms: Percentiles | None


@dataclass
class Timeline:
    interval_ms: int
    points: dict[str, list[TimelinePoint]]  # per queue, in time order
    reasons: dict[str, list[tuple[str, int]]]  # per queue, most frequent first

    def per_minute(self, count: int) -> float:
        return count * MINUTE_MS / self.interval_ms


def choose_interval(first_ms: int, last_ms: int) -> int:
    """The shortest of a minute, 5, 15 minutes, an hour, 6 hours and a day that cuts the
    span into at most MAX_POINTS intervals (a day beyond)."""
    span = last_ms - first_ms
    return next((size for size in INTERVALS_MS if span // size < MAX_POINTS), INTERVALS_MS[-1])


def build_timeline(
    history_dir: str | os.PathLike[str], spark: SparkSession, interval_ms: int | None = None
) -> Timeline:
    """Finished jobs per interval and queue of the history under `history_dir` (see the
    module docstring); `interval_ms` None: chosen by `choose_interval`."""
    from pyspark.sql import functions as F

    folder = Path(history_dir).resolve()
    frame = _read(spark, folder).filter(F.col("finished_on").isNotNull())
    try:
        span = frame.agg(F.min("finished_on"), F.max("finished_on")).first()
        first, last = (span[0], span[1]) if span is not None else (None, None)
        if first is None or last is None:
            return Timeline(interval_ms or MINUTE_MS, {}, {})
        interval = interval_ms or choose_interval(int(first), int(last))
        rows = _per_interval(frame, interval).orderBy("queue", "start").collect()
        reasons = _queue_reasons(frame)
    except Exception as exc:  # Spark errors carry a JVM trace: keep the gist
        raise MigrateError(f"cannot report on {str(folder)!r}: {first_line(exc)}") from None
    points: dict[str, list[TimelinePoint]] = {}
    for row in rows:
        points.setdefault(str(row["queue"]), []).append(
            TimelinePoint(
                int(row["start"]),
                int(row["finished"]),
                int(row["failed"]),
                _percentiles(row["wait"]),
                _percentiles(row["run"]),
            )
        )
    filled = {queue: _fill_gaps(found, interval) for queue, found in points.items()}
    return Timeline(interval, filled, reasons)


def _fill_gaps(points: list[TimelinePoint], interval: int) -> list[TimelinePoint]:
    """Intervals between a queue's first and last with no finished job, as zeros (a line
    drawn across a gap would show work that did not happen)."""
    by_start = {point.start_ms: point for point in points}
    starts = range(points[0].start_ms, points[-1].start_ms + interval, interval)
    return [by_start.get(start, TimelinePoint(start, 0, 0, None, None)) for start in starts]


def _per_interval(frame: DataFrame, interval: int) -> DataFrame:
    from pyspark.sql import functions as F

    start = (F.floor(F.col("finished_on") / interval) * interval).cast("long")
    return (
        frame.withColumn("start", start)
        .groupBy("queue", "start")
        .agg(
            F.count("*").alias("finished"),
            F.sum(F.when(F.col("state") == "failed", 1).otherwise(0)).alias("failed"),
            F.percentile_approx("wait_ms", QUANTILES, ACCURACY).alias("wait"),
            F.percentile_approx("run_ms", QUANTILES, ACCURACY).alias("run"),
        )
    )


def _queue_reasons(frame: DataFrame) -> dict[str, list[tuple[str, int]]]:
    counted = frame.filter(frame.state == "failed").groupBy("queue", "failed_reason").count()
    reasons: dict[str, list[tuple[str, int]]] = {}
    for row in counted.collect():
        reason = row["failed_reason"] or "(no reason)"
        reasons.setdefault(str(row["queue"]), []).append((reason, int(row["count"])))
    return {
        queue: sorted(found, key=lambda item: (-item[1], item[0]))[:TIMELINE_REASONS]
        for queue, found in sorted(reasons.items())
    }
