"""`psyq migrate / export / enqueue / report`: the command-line face of psyq_migrate.

psyq_migrate ships with psyq; it needs the `spark` extra (PySpark, PyArrow, matplotlib),
imported only when a pipeline command runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from psyq.cli.common import positive_int
from psyq.errors import redact_url

if TYPE_CHECKING:
    from psyq_migrate import GroupFigures, MigrationResult, QueuePlan, Timeline, VerifyReport

__all__ = [
    "MIGRATE_COMMANDS",
    "add_migrate_commands",
    "run_enqueue",
    "run_export",
    "run_live",
    "run_migrate",
    "run_report",
]


class ProgressObserver:
    """A rich progress bar on a terminal; elsewhere (logs), one plain line per batch, at most
    one a second (`every`), and always the last one: "moved 600/3000 jobs (queue)"."""

    def __init__(
        self,
        console: Console,
        doing: str = "migrating",
        done: str = "moved",
        unit: str = "jobs",
        every: float = 1.0,
    ) -> None:
        self.console = console
        self.doing, self.done_word, self.unit, self.every = doing, done, unit, every
        self.total = 0
        self.done = 0
        self.bar: Progress | None = None
        self.task_id: TaskID | None = None
        self.printed_at = -math.inf

    def planned(self, plans: list[QueuePlan]) -> None:
        self.total = sum(plan.total for plan in plans)
        if self.console.is_terminal:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.bar.start()
            self.task_id = self.bar.add_task(self.doing, total=self.total)

    def moved(self, queue: str, jobs: int) -> None:
        self.done += jobs
        if self.bar is not None and self.task_id is not None:
            self.bar.update(self.task_id, completed=self.done, description=queue)
        elif self.done >= self.total or time.monotonic() - self.printed_at >= self.every:
            self.printed_at = time.monotonic()
            line = f"{self.done_word} {self.done}/{self.total} {self.unit} ({queue})"
            self.console.print(line, highlight=False)

    def __enter__(self) -> ProgressObserver:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.bar is not None:
            self.bar.stop()


def queue_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected queue names separated by commas, got {text!r}")
    return names


def add_migrate_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """migrate / export / enqueue / report: the Spark pipeline (pip install 'psyq[spark]')."""
    migrate = commands.add_parser("migrate", help="copy every job between two backends (Spark)")
    migrate.add_argument(
        "--from", dest="source", required=True, help="source URL or name (sqlite, redis, ...)"
    )
    migrate.add_argument("--to", dest="destination", required=True, help="destination URL or name")
    migrate.add_argument("--queues", type=queue_list, help="a,b,c (default: every queue)")
    migrate.add_argument("--dry-run", action="store_true", help="print what would move")
    migrate.add_argument("--verify", action="store_true", help="compare counts and ids after")
    migrate.add_argument("--overwrite", action="store_true", help="replace different jobs")
    migrate.add_argument("--master", default="local[*]", help="Spark master (local[*])")
    migrate.add_argument("--partitions", type=positive_int, help="parallel writers")
    migrate.add_argument(
        "--batch-size",
        type=positive_int,
        help="jobs per batch (default: 4000 into Postgres, else 1000; with --live 500)",
    )
    migrate.add_argument(
        "--read",
        choices=("auto", "driver", "tasks"),
        default="auto",
        help="who reads the source (auto: Spark tasks for servers, the driver for files)",
    )
    migrate.add_argument(
        "--wave-pages", type=positive_int, help="batches per task per wave (10; 50 into SQLite)"
    )
    migrate.add_argument(
        "--live",
        action="store_true",
        help="move while producers and workers run on both sides (no Spark; docs/migrate.md)",
    )
    migrate.add_argument(
        "--quiet-for",
        type=float,
        default=10.0,
        help="with --live: end once the source is empty and quiet this long (10 s)",
    )
    migrate.add_argument(
        "--journal", help="with --live: the journal file (default: named from the two URLs)"
    )

    export = commands.add_parser("export", help="write job history to Parquet (Spark)")
    export.add_argument("url", help="backend URL or name")
    export.add_argument("--out", required=True, help="a new folder for the Parquet files")
    export.add_argument("--queues", type=queue_list, help="a,b,c (default: every queue)")

    enqueue = commands.add_parser("enqueue", help="add the rows of a Parquet/CSV file as jobs")
    enqueue.add_argument("--from", dest="source", required=True, help="FILE.parquet or FILE.csv")
    enqueue.add_argument("--to", dest="destination", required=True, help="backend URL or name")
    enqueue.add_argument("--queue", required=True, help="queue name")
    enqueue.add_argument("--name", help="job name for rows without a 'name' column")

    report = commands.add_parser("report", help="throughput, latency, failures of an export")
    report.add_argument("history", help="folder written by psyq export")
    report.add_argument("--chart", help="PNG file (default: HISTORY/report.png)")
    report.add_argument("--html", help="HTML page (default: HISTORY/report.html)")
    report.add_argument(
        "--interval", type=positive_int, help="minutes per interval (default: by the span)"
    )
    for command in (export, enqueue, report):
        command.add_argument("--master", default="local[*]", help="Spark master (local[*])")


INTERRUPTED = (
    "psyq migrate: interrupted; run the same command again to finish (jobs already copied "
    "are skipped)"
)


def run_migrate(args: argparse.Namespace) -> int:
    if args.live:
        return run_live(args)
    from psyq_migrate import MigrateOptions, migrate

    options = MigrateOptions(
        source=args.source,
        destination=args.destination,
        queues=args.queues,
        overwrite=args.overwrite,
        dry_run=args.dry_run,
        verify=args.verify,
        partitions=args.partitions,
        batch_size=args.batch_size,
        pages_per_task=args.wave_pages,
        read_in_tasks={"auto": None, "driver": False, "tasks": True}[args.read],
    )
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    try:
        with ProgressObserver(Console(stderr=True, highlight=False)) as observer:
            result = migrate(options, observer=observer, master=args.master)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    if args.dry_run:
        print_plan(out, result.plans, options.destination)
        return 0
    print_summary(out, result)
    if result.verify is not None:
        print_verify(out, result.verify)
        return 0 if result.verify.ok else 1
    return 0


LIVE_ONLY_SPARK = ("dry_run", "verify", "overwrite", "partitions", "wave_pages")


def run_live(args: argparse.Namespace) -> int:
    """`psyq migrate --live`: psyq_migrate.live, a progress line a second on stderr."""
    import asyncio

    from psyq_migrate.errors import MigrateError
    from psyq_migrate.live import BATCH, LiveProgress, migrate_live

    given = [name for name in LIVE_ONLY_SPARK if getattr(args, name)]
    if given:
        option = "--" + given[0].replace("_", "-")
        raise MigrateError(f"{option} is an option of the Spark migration, not of --live")
    if args.quiet_for < 0:
        raise MigrateError(f"--quiet-for must be 0 or more seconds, got {args.quiet_for}")

    def show(step: LiveProgress) -> None:
        line = (
            f"moved {step.moved}, left on A {step.left} (active {step.active}), "
            f"schedulers {step.schedulers}, conflicts {step.conflicts}, "
            f"{step.rate:,.0f} jobs/s, {step.seconds:.0f} s"
        )
        print(("done: " if step.done else "") + line, file=sys.stderr, flush=True)

    try:
        result = asyncio.run(
            migrate_live(
                args.source,
                args.destination,
                args.queues,
                args.quiet_for,
                args.journal,
                show,
                args.batch_size or BATCH,
            )
        )
    except KeyboardInterrupt:
        print(INTERRUPTED_LIVE, file=sys.stderr)
        return 130
    floors = ", ".join(f"{queue} >= {floor}" for queue, floor in result.floors.items())
    print(
        f"moved {result.moved} jobs and {result.schedulers} schedulers of {len(result.queues)} "
        f"queues into {redact_url(args.destination)} in {result.seconds:.1f} s; "
        f"{result.conflicts} refused (kept in the journal {result.journal}); "
        f"new ids there: {floors or 'none'}"
    )
    return 1 if result.conflicts else 0


INTERRUPTED_LIVE = (
    "psyq migrate --live: interrupted; run the same command again to finish (the journal "
    "settles the moves under way first)"
)


def print_plan(out: Console, plans: list[QueuePlan], destination: str) -> None:
    where = redact_url(destination)
    table = Table(title=f"dry run: would move into {where} (nothing written)")
    for column in ("queue", "state", "jobs"):
        table.add_column(column, justify="right" if column == "jobs" else "left")
    for plan in plans:
        for state, count in plan.counts.items():
            if count:
                table.add_row(plan.name, state, str(count))
        meta = plan.meta
        extras = (
            f"paused={meta['paused']} last_id={meta['last_id']} "
            f"schedulers={len(meta['schedulers'])} dedup_keys={len(meta['dedup'])}"
        )
        table.add_row(plan.name, "meta", extras)
    out.print(table)
    out.print(f"total: {sum(plan.total for plan in plans)} jobs in {len(plans)} queues")


def print_summary(out: Console, result: MigrationResult) -> None:
    table = Table(title="migrated")
    for column in ("queue", "jobs", "written", "already there"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    for plan in result.plans:
        moved, written = result.moved.get(plan.name, 0), result.written.get(plan.name, 0)
        table.add_row(plan.name, str(moved), str(written), str(moved - written))
    out.print(table)
    rate = result.total / result.seconds if result.seconds else 0.0
    out.print(
        f"{result.total} jobs in {len(result.plans)} queues, {result.waves} waves, "
        f"{result.writers} writer(s), {result.seconds:.1f} s ({rate:,.0f} jobs/s)"
    )


def print_verify(out: Console, report: VerifyReport) -> None:
    table = Table(title="verify")
    columns = ("queue", "state", "source", "destination", "source ids", "destination ids", "")
    for column in columns:
        table.add_column(column)
    for row in report.rows:
        if not (row.source.count or row.destination.count):
            continue
        table.add_row(
            row.queue,
            row.state,
            str(row.source.count),
            str(row.destination.count),
            f"{row.source.checksum:016x}",
            f"{row.destination.checksum:016x}",
            "ok" if row.ok else "DIFFERENT",
        )
    out.print(table)
    if report.ok:
        out.print("verify: source and destination hold the same jobs")
    else:
        out.print(f"verify: {len(report.differences)} difference(s)")


def run_export(args: argparse.Namespace) -> int:
    from psyq_migrate.history import export_history
    from psyq_migrate.spark import spark_session

    progress = ProgressObserver(Console(stderr=True, highlight=False), "exporting", "exported")
    with spark_session(args.master) as spark, progress:
        count = export_history(args.url, args.out, spark, args.queues, progress)
    Console(highlight=False).print(f"exported {count} jobs to {args.out}")
    return 0


def run_enqueue(args: argparse.Namespace) -> int:
    from psyq_migrate.history import enqueue_file
    from psyq_migrate.spark import spark_session

    console = Console(stderr=True, highlight=False)
    progress = ProgressObserver(console, "enqueueing", "enqueued", "rows")
    with spark_session(args.master) as spark, progress:
        count = enqueue_file(args.source, args.destination, args.queue, spark, args.name, progress)
    Console(highlight=False).print(f"enqueued {count} rows into {args.queue}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from psyq_migrate import build_report, build_timeline, write_chart, write_html
    from psyq_migrate.spark import spark_session

    interval = args.interval * 60_000 if args.interval else None
    with spark_session(args.master) as spark:
        figures = build_report(args.history, spark)
        timeline = build_timeline(args.history, spark, interval)
    chart = args.chart or os.path.join(args.history, "report.png")
    page = args.html or os.path.join(args.history, "report.html")
    write_chart(figures, chart, timeline)
    write_html(figures, timeline, page, f"psyq report: {os.path.abspath(args.history)}")
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    print_report(out, figures)
    print_timeline(out, timeline)
    out.print(f"chart: {chart}\npage: {page}", soft_wrap=True)
    return 0


def print_report(out: Console, figures: list[GroupFigures]) -> None:
    from psyq_migrate.rendering import GROUP_COLUMNS, group_cells

    table = Table(title="report")
    for column in GROUP_COLUMNS:
        table.add_column(column)
    for group in figures:
        table.add_row(*group_cells(group))
    out.print(table)


def print_timeline(out: Console, timeline: Timeline) -> None:
    """The top failure reasons per queue with their counts (the intervals are in the chart
    and the page)."""
    table = Table(title="top failure reasons")
    for column in ("queue", "reason", "count"):
        table.add_column(column, justify="right" if column == "count" else "left")
    for queue, reasons in timeline.reasons.items():
        for reason, count in reasons:
            table.add_row(queue, reason, str(count))
    if table.rows:
        out.print(table)


MIGRATE_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "migrate": run_migrate,
    "export": run_export,
    "enqueue": run_enqueue,
    "report": run_report,
}
