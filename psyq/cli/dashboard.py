"""`psyq dashboard`: serve the dashboard (psyq/dashboard/) until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import os

from psyq.cli.common import CliError, cannot_listen

__all__ = ["add_dashboard_parser", "run_dashboard"]


def add_dashboard_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("dashboard", help="a web page, JSON API and /metrics for queues")
    parser.add_argument(
        "--connection",
        help="backend URL or name: sqlite, redis, postgres, psyq, memory (default: PSYQ_URL)",
    )
    parser.add_argument("--prefix", default="bull", help="key prefix (bull)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (8765)")
    parser.add_argument("--read-only", action="store_true", help="refuse every action (403)")
    parser.add_argument(
        "--token", help="every API call needs this bearer token (or PSYQ_DASHBOARD_TOKEN)"
    )


def run_dashboard(args: argparse.Namespace) -> int:
    try:
        from aiohttp import web

        from psyq.dashboard.web import create_app
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs aiohttp: pip install 'psyq[dashboard]' ({exc})"
        ) from None
    from psyq.dashboard.store import Store

    token = args.token or os.environ.get("PSYQ_DASHBOARD_TOKEN") or None
    app = create_app(Store(args.connection, args.prefix), read_only=args.read_only, token=token)
    where = f"http://{args.host}:{args.port}/"
    ready = f"psyq dashboard on {where}{' (read-only)' if args.read_only else ''}"
    try:  # aiohttp calls `print` once it listens: the line says the page is up
        web.run_app(app, host=args.host, port=args.port, print=lambda _: print(ready, flush=True))
    except OSError as exc:
        raise cannot_listen(args.host, args.port, exc) from None
    return 0
