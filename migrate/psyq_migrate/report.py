"""`psyq report DIR`: figures per queue and job name from a history export, and a PNG chart.

- throughput per minute: finished jobs (completed + failed) divided by the minutes between
  the group's first and last finish (at least one minute);
- wait latency (processed_on - due time) and run latency (finished_on - processed_on):
  p50 / p95 / p99, each an observed value (Spark's percentile_approx, exact on small data);
- failure rate: failed / finished; the three most frequent failure reasons.
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

__all__ = ["GroupFigures", "Percentiles", "build_report", "write_chart"]

QUANTILES = [0.5, 0.95, 0.99]
ACCURACY = 100_000
TOP_REASONS = 3

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


def write_chart(figures: list[GroupFigures], path: str | os.PathLike[str]) -> None:
    """A PNG: throughput per minute, and run latency p50/p95/p99, per queue/name."""
    try:
        import matplotlib
    except ImportError:
        raise MigrateError("matplotlib is not installed: pip install 'psyq[spark]'") from None
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    labels = [f"{group.queue}/{group.name}" for group in figures]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, len(labels) * 1.2), 7))
    top.bar(labels, [group.throughput_per_minute for group in figures], color="tab:blue")
    top.set_ylabel("finished jobs / minute")
    top.set_title("throughput")
    width = 0.25
    for index, quantile in enumerate(("p50", "p95", "p99")):
        values = [group.run_ms[index] if group.run_ms else 0 for group in figures]
        positions = [i + (index - 1) * width for i in range(len(labels))]
        bottom.bar(positions, values, width, label=quantile)
    bottom.set_xticks(range(len(labels)), labels)
    bottom.set_ylabel("run latency (ms)")
    bottom.legend()
    for axis in (top, bottom):
        axis.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
