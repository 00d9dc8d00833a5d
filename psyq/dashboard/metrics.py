"""The store's queues as Prometheus gauges, in the text exposition format 0.0.4.

    psyq_queue_jobs{queue="emails",state="waiting"} 12
    psyq_queue_paused{queue="emails"} 0
    psyq_queue_workers{queue="emails"} 3

These are the stored counts (every producer and worker, any language); the
`PrometheusMetrics` plugin counts what one process does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["escape_label", "render_metrics"]

_FAMILIES = (
    ("psyq_queue_jobs", "Jobs in the store, per queue and state."),
    ("psyq_queue_paused", "1 while the queue is paused."),
    ("psyq_queue_workers", "Workers registered on the queue."),
)


def escape_label(value: str) -> str:
    """A label value as the format wants it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(summaries: Iterable[dict[str, Any]]) -> str:
    """Text for `/metrics` from the dashboard store's queue summaries."""
    rows = list(summaries)
    samples = {
        "psyq_queue_jobs": [
            (f'queue="{escape_label(row["name"])}",state="{state}"', count)
            for row in rows
            for state, count in row["counts"].items()
        ],
        "psyq_queue_paused": [(_queue(row), int(row["paused"])) for row in rows],
        "psyq_queue_workers": [(_queue(row), row["workers"]) for row in rows],
    }
    lines = []
    for name, help_text in _FAMILIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [f"{name}{{{labels}}} {value}" for labels, value in samples[name]]
    return "\n".join(lines) + "\n"


def _queue(row: dict[str, Any]) -> str:
    return f'queue="{escape_label(row["name"])}"'
