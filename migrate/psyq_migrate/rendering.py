"""`psyq report`'s output: the figures (figures.py) drawn as a PNG chart (matplotlib, Agg)
and written as one self-contained HTML page.

The chart is the timeline per queue (finished and failed jobs per minute, wait and run
latency p50 / p95 / p99) with the top failure reasons, or, without a timeline, throughput
and run latency per queue and job name. The page holds the same chart as inline SVG and
the figures as tables.
"""

from __future__ import annotations

import html
import io
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psyq_migrate.errors import MigrateError
from psyq_migrate.figures import (
    MINUTE_MS,
    TIMELINE_REASONS,
    GroupFigures,
    Percentiles,
    Timeline,
)

__all__ = [
    "GROUP_COLUMNS",
    "draw_timeline",
    "group_cells",
    "triple",
    "write_chart",
    "write_html",
]


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
        for axis, count in ((finished, "finished"), (failed, "failed")):
            rates = [timeline.per_minute(getattr(point, count)) for point in points]
            axis.plot(times, rates, color=color, marker=".", label=queue)
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


# The per queue and name table's columns, as the HTML page and `psyq report` show them.
GROUP_COLUMNS = ["queue", "name", "jobs", "per min", "wait p50/p95/p99 ms"]
GROUP_COLUMNS += ["run p50/p95/p99 ms", "failed", "top failure reasons"]


def group_cells(group: GroupFigures) -> list[str]:
    """One row of the per queue and name table, as text (GROUP_COLUMNS)."""
    return [
        group.queue,
        group.name,
        str(group.jobs),
        f"{group.throughput_per_minute:.1f}",
        triple(group.wait_ms),
        triple(group.run_ms),
        "-" if group.failure_rate is None else f"{group.failure_rate:.1%}",
        "; ".join(f"{reason} ({count})" for reason, count in group.top_reasons),
    ]


def _groups_table(figures: list[GroupFigures]) -> str:
    return _table(GROUP_COLUMNS, [group_cells(group) for group in figures], text_columns=2)


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
