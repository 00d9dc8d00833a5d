"""`psyq` — subcommands and their arguments; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import psyq
from psyq.cli.common import CliError, cannot_listen, positive_int, positive_seconds, seconds
from psyq.cli.health import add_health_arguments, health_options
from psyq.errors import PsyqError
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["CliError", "cannot_listen", "main", "positive_int"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="psyq", description="psyq job queues")
    parser.add_argument("--version", action="version", version=f"psyq {psyq.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run a producer and a worker on the embedded default")
    demo.add_argument("--jobs", type=positive_int, default=2000, help="jobs to add (2000)")
    demo.add_argument("--concurrency", type=positive_int, default=50, help="worker slots (50)")
    demo.add_argument(
        "--connection", help=f"backend URL or name (default: PSYQ_URL or {psyq.DEFAULT_URL})"
    )

    worker = commands.add_parser("worker", help="process jobs with a Python function")
    worker.add_argument("processor", help="module:function, e.g. myapp.tasks:send")
    worker.add_argument("--queue", required=True, help="queue name")
    worker.add_argument(
        "--connection",
        help="backend URL or name: sqlite, redis, postgres, psyq, memory (default: PSYQ_URL)",
    )
    worker.add_argument("--concurrency", type=positive_int, default=1, help="job slots (1)")
    worker.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"key prefix ({DEFAULT_PREFIX})")
    add_health_arguments(worker)
    add_server_parser(commands)
    add_check_parser(commands)
    from psyq.cli.dashboard import add_dashboard_parser
    from psyq.cli.inspect import add_inspect_commands
    from psyq.cli.migrate import add_migrate_commands

    add_inspect_commands(commands)
    add_dashboard_parser(commands)
    add_migrate_commands(commands)
    return parser


def add_server_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = commands.add_parser("server", help="serve the engine to psyq:// clients")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    server.add_argument("--port", type=int, default=6789, help="port (6789; 0 = a free one)")
    server.add_argument(
        "--data", default="psyq.db", help="SQLite file, memory, or a sqlite:/// URL (psyq.db)"
    )
    server.add_argument(
        "--durability",
        choices=["buffered", "durable"],
        default="buffered",
        help="SQLite durability when --data is a file (buffered)",
    )
    server.add_argument("--token", help="clients must send this token (or PSYQ_SERVER_TOKEN)")
    server.add_argument("--tls-cert", help="TLS certificate (PEM); needs --tls-key")
    server.add_argument("--tls-key", help="TLS private key (PEM)")
    server.add_argument("--max-frame", type=positive_int, help="largest frame in bytes (64 MiB)")
    server.add_argument(
        "--max-in-flight", type=positive_int, help="requests in flight per connection (1024)"
    )
    server.add_argument(
        "--frame-timeout", type=positive_seconds, help="seconds a frame may stay incomplete (30)"
    )
    server.add_argument(
        "--hello-timeout",
        type=positive_seconds,
        help="seconds a new connection has to say hello (10)",
    )
    server.add_argument(
        "--idle-timeout",
        type=seconds,
        help="close a connection silent this long with no request running (0 = never)",
    )
    server.add_argument(
        "--max-unsent",
        type=positive_int,
        help="bytes of answers waiting per connection before it is no longer read (1 MiB)",
    )
    server.add_argument(
        "--max-unsent-total",
        type=positive_int,
        help="bytes of answers waiting on all connections before one is closed (256 MiB)",
    )
    add_health_arguments(server)


def add_check_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = commands.add_parser(
        "check", help="exit 0 when a store answers and psyq can use it, else 1 with the reason"
    )
    check.add_argument("url", help="backend URL or name: sqlite, redis, postgres, psyq, memory")
    check.add_argument("--timeout", type=float, default=10.0, help="seconds to wait (10)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from psyq.cli.urls import resolve_cli_urls

        resolve_cli_urls(args)
        from psyq.cli.migrate import MIGRATE_COMMANDS

        if args.command in MIGRATE_COMMANDS:
            return MIGRATE_COMMANDS[args.command](args)
        if args.command == "demo":
            from psyq.cli.demo import run_demo

            return asyncio.run(run_demo(args.jobs, args.concurrency, args.connection))
        if args.command in ("inspect", "queue"):
            from psyq.cli.inspect import run_inspect, run_queue_action

            return run_inspect(args) if args.command == "inspect" else run_queue_action(args)
        if args.command == "dashboard":
            from psyq.cli.dashboard import run_dashboard

            return run_dashboard(args)
        if args.command == "server":
            from psyq.cli.server import run_server, server_options

            return run_server(server_options(args))
        if args.command == "check":
            from psyq.cli.check import run_check

            return run_check(args.url, args.timeout)
        from psyq.cli.worker import run_worker

        return run_worker(
            args.processor,
            args.queue,
            args.connection,
            args.concurrency,
            args.prefix,
            health_options(args),
        )
    except (CliError, PsyqError) as exc:
        print(f"psyq {args.command}: {exc}", file=sys.stderr)
        return 2
