"""`psyq dashboard`: serve the dashboard (psyq/dashboard/) until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from typing import Any

from psyq.cli.common import CliError, cannot_listen
from psyq.cli.health import Health, add_health_arguments, health_options
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["add_dashboard_parser", "run_dashboard"]


def add_dashboard_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("dashboard", help="a web page, JSON API and /metrics for queues")
    parser.add_argument(
        "--connection",
        help="backend URL or name: sqlite, redis, postgres, psyq, memory (default: PSYQ_URL)",
    )
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"key prefix ({DEFAULT_PREFIX})")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (8765)")
    parser.add_argument("--read-only", action="store_true", help="refuse every action (403)")
    parser.add_argument(
        "--token", help="every API call needs this bearer token (or PSYQ_DASHBOARD_TOKEN)"
    )
    add_health_arguments(parser)


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
    store = Store(args.connection, args.prefix)
    app = create_app(store, read_only=args.read_only, token=token)
    _serve_health(app, args, store.now_ms)
    where = f"http://{args.host}:{args.port}/"
    ready = f"psyq dashboard on {where}{' (read-only)' if args.read_only else ''}"
    try:  # aiohttp calls `print` once it listens: the line says the page is up
        web.run_app(app, host=args.host, port=args.port, print=lambda _: print(ready, flush=True))
    except OSError as exc:
        raise cannot_listen(args.host, args.port, exc) from None
    return 0


def _serve_health(app: Any, args: argparse.Namespace, probe: Callable[[], Awaitable[int]]) -> None:
    """The probes beside the page (`--health-port`), on the app's loop, while it runs."""
    options = health_options(args)
    if options.port is None:
        return
    health = Health(probe, lambda: True, options.limits)

    async def start(app: Any) -> None:
        try:
            await health.start(options.host, options.port or 0)
        except OSError as exc:
            raise cannot_listen(options.host, options.port or 0, exc) from None

    async def stop(app: Any) -> None:
        await health.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
