"""psyq's migration tool and Spark data pipeline (the top-level folder `migrate/`).

- `migrate(MigrateOptions(...), spark)`: copy every job, log, scheduler, dedup key, paused
  flag and id counter of one backend into another (`psyq migrate`).
- `verify_backends(source, destination)`: per queue and state, counts and id checksums.
- `export_history(url, out_dir, spark)`: job history to Parquet (`psyq export`).
- `enqueue_dataframe(df, url, queue)` / `enqueue_file(path, url, queue, spark)`: bulk-add
  the rows of a DataFrame, Parquet or CSV file as jobs (`psyq enqueue`).
- `build_report(history_dir, spark)` / `build_timeline(history_dir, spark)`: throughput,
  latency percentiles and failure rates per queue and job name, and per queue over time;
  `write_chart(figures, path, timeline)` / `write_html(figures, timeline, path)`: a PNG
  chart and a self-contained HTML page (`psyq report`).

Only the BackendAdapter's export / import / queue-meta methods and `list_queues` touch the
backends, so every backend that implements them can be a source or a destination.
"""

from __future__ import annotations

from psyq_migrate.errors import MigrateError
from psyq_migrate.figures import GroupFigures, Timeline, build_report, build_timeline
from psyq_migrate.history import enqueue_dataframe, enqueue_file, export_history
from psyq_migrate.pipeline import (
    MigrateOptions,
    MigrationResult,
    QueuePlan,
    migrate,
    verify_backends,
)
from psyq_migrate.rendering import write_chart, write_html
from psyq_migrate.verify import VerifyReport, VerifyRow

__all__ = [
    "GroupFigures",
    "MigrateError",
    "MigrateOptions",
    "MigrationResult",
    "QueuePlan",
    "Timeline",
    "VerifyReport",
    "VerifyRow",
    "build_report",
    "build_timeline",
    "enqueue_dataframe",
    "enqueue_file",
    "export_history",
    "migrate",
    "verify_backends",
    "write_chart",
    "write_html",
]
