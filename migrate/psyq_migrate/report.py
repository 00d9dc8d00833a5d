"""`psyq report DIR`: figures from a history export, as tables, a PNG chart and an HTML page.

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

import html
import io
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    "write_chart",
    "write_html",
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


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise MigrateError("matplotlib is not installed: pip install 'psyq[spark]'") from None
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    return plt


def draw_timeline(timeline: Timeline) -> Any:
    """A matplotlib figure: per queue over time, finished and failed jobs per minute, wait
    and run latency (p50 dashed, p95 solid, p99 dotted); then the top failure reasons."""
    import matplotlib.dates as mdates

    plt = _pyplot()
    fig, axes = plt.subplots(5, 1, figsize=(10, 16))
    finished, failed, wait, run, reasons = axes
    for index, (queue, points) in enumerate(sorted(timeline.points.items())):
        color = f"C{index % 10}"
        times = [_time(point.start_ms) for point in points]
        finished.plot(
            times,
            [timeline.per_minute(p.finished) for p in points],
            color=color,
            marker=".",
            label=queue,
        )
        failed.plot(
            times,
            [timeline.per_minute(p.failed) for p in points],
            color=color,
            marker=".",
            label=queue,
        )
        for axis, pick in ((wait, "wait_ms"), (run, "run_ms")):
            for quantile, style in enumerate(("--", "-", ":")):
                values = [_quantile(getattr(point, pick), quantile) for point in points]
                label = f"{queue} {('p50', 'p95', 'p99')[quantile]}"
                axis.plot(times, values, linestyle=style, color=color, label=label)
    titles = (
        (finished, "finished jobs / minute"),
        (failed, "failed jobs / minute"),
        (wait, "wait (ms): p50 --, p95 -, p99 :"),
        (run, "run (ms): p50 --, p95 -, p99 :"),
    )
    minutes = timeline.interval_ms // MINUTE_MS
    dates: Any = mdates  # untyped
    for axis, title in titles:
        axis.set_title(f"{title}, per {minutes} min interval")
        locator = dates.AutoDateLocator(minticks=3, maxticks=10)
        axis.xaxis.set_major_locator(locator)
        axis.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))
        axis.set_ylim(bottom=0)
        axis.set_xlabel("UTC")
        if axis.has_data():
            axis.legend(fontsize="small")
    labels, counts = _reason_bars(timeline)
    reasons.barh(labels[::-1], counts[::-1], color="tab:red")
    reasons.set_title("top failure reasons (count)")
    fig.tight_layout()
    return fig


def _reason_bars(timeline: Timeline) -> tuple[list[str], list[int]]:
    found = [
        (f"{queue}: {_short(reason)}", count)
        for queue, reasons in timeline.reasons.items()
        for reason, count in reasons
    ]
    found.sort(key=lambda item: -item[1])
    return [label for label, _ in found[:TIMELINE_REASONS]], [
        n for _, n in found[:TIMELINE_REASONS]
    ]


def _short(text: str, width: int = 60) -> str:
    line = text.splitlines()[0] if text else text
    return line if len(line) <= width else line[: width - 1] + "…"


def _time(ms: int) -> Any:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _quantile(values: Percentiles | None, index: int) -> float:
    return float("nan") if values is None else float(values[index])


def write_chart(
    figures: list[GroupFigures], path: str | os.PathLike[str], timeline: Timeline | None = None
) -> None:
    """A PNG: the timeline (see `draw_timeline`); without one, throughput per minute and
    run latency p50/p95/p99 per queue/name."""
    plt = _pyplot()
    fig = draw_timeline(timeline) if timeline is not None else _draw_groups(figures)
    fig.savefig(path, format="png")
    plt.close(fig)


def _draw_groups(figures: list[GroupFigures]) -> Any:
    plt = _pyplot()
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
    return fig


# ---------------------------------------------------------------------- the HTML page
PAGE_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
svg { max-width: 100%; height: auto; }
"""


def write_html(
    figures: list[GroupFigures],
    timeline: Timeline,
    path: str | os.PathLike[str],
    title: str = "psyq report",
) -> None:
    """One self-contained HTML page: the timeline chart as inline SVG, the top failure
    reasons, the per queue and job name table and every interval's figures. No script, no
    stylesheet or font from elsewhere: it opens offline, from a file or a mail."""
    plt = _pyplot()
    fig = draw_timeline(timeline)
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    plt.close(fig)
    chart = svg.getvalue()
    chart = chart[chart.index("<svg") :]  # drop the XML prolog and DOCTYPE
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>intervals of {timeline.interval_ms // MINUTE_MS} min, by finish time (UTC)</p>",
        f'<figure id="timeline">{chart}</figure>',
        "<h2>Top failure reasons</h2>",
        _reasons_table(timeline),
        "<h2>Per queue and job name</h2>",
        _groups_table(figures),
        "<h2>Per interval</h2>",
        _timeline_table(timeline),
        "</body></html>",
    ]
    Path(path).write_text("\n".join(parts), encoding="utf-8")


def _table(headers: list[str], rows: list[list[str]], text_columns: int = 1) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in headers)
    lines = []
    for row in rows:
        cells = "".join(
            f'<td class="text">{html.escape(cell)}</td>'
            if index < text_columns
            else f"<td>{html.escape(cell)}</td>"
            for index, cell in enumerate(row)
        )
        lines.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table>"


def _reasons_table(timeline: Timeline) -> str:
    rows = [
        [queue, reason, str(count)]
        for queue, reasons in timeline.reasons.items()
        for reason, count in reasons
    ]
    if not rows:
        return "<p>no failed jobs</p>"
    return _table(["queue", "reason", "count"], rows, text_columns=2)


def _groups_table(figures: list[GroupFigures]) -> str:
    headers = ["queue", "name", "jobs", "per min", "wait p50/p95/p99 ms"]
    headers += ["run p50/p95/p99 ms", "failed", "top failure reasons"]
    rows = [
        [
            group.queue,
            group.name,
            str(group.jobs),
            f"{group.throughput_per_minute:.1f}",
            triple(group.wait_ms),
            triple(group.run_ms),
            "-" if group.failure_rate is None else f"{group.failure_rate:.1%}",
            "; ".join(f"{reason} ({count})" for reason, count in group.top_reasons),
        ]
        for group in figures
    ]
    return _table(headers, rows, text_columns=2)


def _timeline_table(timeline: Timeline) -> str:
    headers = ["queue", "interval start (UTC)", "finished / min", "failed / min"]
    headers += ["wait p50/p95/p99 ms", "run p50/p95/p99 ms"]
    rows = [
        [
            queue,
            _time(point.start_ms).strftime("%Y-%m-%d %H:%M"),
            f"{timeline.per_minute(point.finished):.1f}",
            f"{timeline.per_minute(point.failed):.1f}",
            triple(point.wait_ms),
            triple(point.run_ms),
        ]
        for queue, points in timeline.points.items()
        for point in points
    ]
    return _table(headers, rows, text_columns=2)


def triple(values: Percentiles | None) -> str:
    """p50/p95/p99 as text ("-" when nothing was measured)."""
    return "-" if values is None else "/".join(str(value) for value in values)
