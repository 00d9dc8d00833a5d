"""`psyq` — subcommands and their arguments; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import psyq
from psyq.errors import PsyqError

__all__ = ["CliError", "main"]


class CliError(Exception):
    """Bad input on the command line: printed as one line, exit code 2."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="psyq", description="psyq job queues")
    parser.add_argument("--version", action="version", version=f"psyq {psyq.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run a producer and a worker on the embedded default")
    demo.add_argument("--jobs", type=positive_int, default=2000, help="jobs to add (2000)")
    demo.add_argument("--concurrency", type=positive_int, default=50, help="worker slots (50)")
    demo.add_argument("--connection", help=f"backend URL (default: PSYQ_URL or {psyq.DEFAULT_URL})")

    worker = commands.add_parser("worker", help="process jobs with a Python function")
    worker.add_argument("processor", help="module:function, e.g. myapp.tasks:send")
    worker.add_argument("--queue", required=True, help="queue name")
    worker.add_argument("--connection", help="backend URL (default: PSYQ_URL or the default)")
    worker.add_argument("--concurrency", type=positive_int, default=1, help="job slots (1)")
    worker.add_argument("--prefix", default="bull", help="key prefix (bull)")
    add_pipeline_commands(commands)
    return parser


def queue_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected queue names separated by commas, got {text!r}")
    return names


def add_pipeline_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """migrate / export / enqueue / report: the Spark pipeline (pip install 'psyq[spark]')."""
    migrate = commands.add_parser("migrate", help="copy every job between two backends (Spark)")
    migrate.add_argument("--from", dest="source", required=True, help="source backend URL")
    migrate.add_argument("--to", dest="destination", required=True, help="destination URL")
    migrate.add_argument("--queues", type=queue_list, help="a,b,c (default: every queue)")
    migrate.add_argument("--dry-run", action="store_true", help="print what would move")
    migrate.add_argument("--verify", action="store_true", help="compare counts and ids after")
    migrate.add_argument("--overwrite", action="store_true", help="replace different jobs")
    migrate.add_argument("--master", default="local[*]", help="Spark master (local[*])")
    migrate.add_argument("--partitions", type=positive_int, help="parallel writers")
    migrate.add_argument("--batch-size", type=positive_int, default=1000, help="jobs per batch")
    migrate.add_argument(
        "--read",
        choices=("auto", "driver", "tasks"),
        default="auto",
        help="who reads the source (auto: Spark tasks for servers, the driver for files)",
    )
    migrate.add_argument(
        "--wave-pages", type=positive_int, help="batches per task per wave (10; 50 into SQLite)"
    )

    export = commands.add_parser("export", help="write job history to Parquet (Spark)")
    export.add_argument("url", help="backend URL")
    export.add_argument("--out", required=True, help="a new folder for the Parquet files")
    export.add_argument("--queues", type=queue_list, help="a,b,c (default: every queue)")

    enqueue = commands.add_parser("enqueue", help="add the rows of a Parquet/CSV file as jobs")
    enqueue.add_argument("--from", dest="source", required=True, help="FILE.parquet or FILE.csv")
    enqueue.add_argument("--to", dest="destination", required=True, help="backend URL")
    enqueue.add_argument("--queue", required=True, help="queue name")
    enqueue.add_argument("--name", help="job name for rows without a 'name' column")

    report = commands.add_parser("report", help="throughput, latency, failures of an export")
    report.add_argument("history", help="folder written by psyq export")
    report.add_argument("--chart", help="PNG file (default: HISTORY/report.png)")
    for command in (export, enqueue, report):
        command.add_argument("--master", default="local[*]", help="Spark master (local[*])")


PIPELINE_COMMANDS = ("migrate", "export", "enqueue", "report")


def run_pipeline_command(args: argparse.Namespace) -> int:
    try:
        from psyq.cli import pipeline
    except ImportError as exc:
        raise CliError(f"{exc}: the pipeline needs pip install 'psyq[spark]'") from None
    run = {
        "migrate": pipeline.run_migrate,
        "export": pipeline.run_export,
        "enqueue": pipeline.run_enqueue,
        "report": pipeline.run_report,
    }[args.command]
    return run(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in PIPELINE_COMMANDS:
            return run_pipeline_command(args)
        if args.command == "demo":
            from psyq.cli.demo import run_demo

            return asyncio.run(run_demo(args.jobs, args.concurrency, args.connection))
        from psyq.cli.worker import run_worker

        return run_worker(
            args.processor, args.queue, args.connection, args.concurrency, args.prefix
        )
    except (CliError, PsyqError) as exc:
        print(f"psyq {args.command}: {exc}", file=sys.stderr)
        return 2
