"""`psyq server`: serve one engine (SQLite file or memory) to psyq:// clients.

    psyq server [--host 127.0.0.1] [--port 6789] [--data jobs.db | memory | URL]
                [--durability buffered|durable] [--token SECRET | PSYQ_SERVER_TOKEN]
                [--tls-cert cert.pem --tls-key key.pem]
                [--max-frame B] [--max-in-flight N] [--frame-timeout S]
                [--hello-timeout S] [--idle-timeout S] [--max-unsent B] [--max-unsent-total B]

Prints `psyq server listening on HOST:PORT` once it accepts connections (with --port 0 the
port is a free one), and runs until SIGTERM/SIGINT; then it accepts no more connections,
answers every call its clients already sent (up to DRAIN_TIMEOUT_S; clients of protocol 4
are told it goes away, so a call is never lost between the two), closes the connections and
flushes the SQLite write buffer.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
from dataclasses import dataclass, field, fields
from pathlib import Path

from psyq.backends import open_backend, release_backend
from psyq.backends.server.server import DRAIN_TIMEOUT_S, serve
from psyq.backends.server.server_connection import ServerLimits
from psyq.cli.common import CliError, cannot_listen
from psyq.cli.health import HealthOptions, health_options, serving_health
from psyq.cli.loop import loop_factory, run
from psyq.errors import redact_url

__all__ = ["ServerOptions", "data_url", "run_server", "server_options"]

log = logging.getLogger("psyq.server")

# The ServerLimits fields given as --max-frame, --hello-timeout, ... (absent: the default).
LIMIT_OPTIONS = tuple(field.name for field in fields(ServerLimits))


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 6789
    data: str = "psyq.db"
    durability: str = "buffered"
    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    limits: ServerLimits = field(default_factory=ServerLimits)
    health: HealthOptions = field(default_factory=HealthOptions)


def server_options(args: argparse.Namespace) -> ServerOptions:
    """ServerOptions from the parsed `psyq server` arguments."""
    given = {
        name: getattr(args, name) for name in LIMIT_OPTIONS if getattr(args, name, None) is not None
    }
    limits = ServerLimits(**given)
    return ServerOptions(
        args.host,
        args.port,
        args.data,
        args.durability,
        args.token,
        args.tls_cert,
        args.tls_key,
        limits,
        health_options(args),
    )


def data_url(data: str, durability: str) -> str:
    """The engine URL for --data: memory, a URL of the engine, or a file path."""
    if data in ("memory", "memory://"):
        return "memory://"
    if data.startswith(("memory://", "sqlite://")):
        return data
    if "://" in data:
        raise CliError(f"--data must be memory, a file path or a sqlite:/// URL, got {data!r}")
    return f"sqlite:///{Path(data).resolve()}?durability={durability}"


def tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise CliError("TLS needs both --tls-cert and --tls-key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise CliError(f"cannot load the TLS certificate {cert!r} / key {key!r}: {exc}") from None
    return context


def run_server(options: ServerOptions) -> int:
    url = data_url(options.data, options.durability)
    context = tls_context(options.tls_cert, options.tls_key)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run(_serve(options, url, context))


async def _serve(options: ServerOptions, url: str, context: ssl.SSLContext | None) -> int:
    token = options.token or os.environ.get("PSYQ_SERVER_TOKEN") or None
    backend = await open_backend(url)
    try:
        try:
            server, (host, port) = await serve(
                backend,
                options.host,
                options.port,
                token=token,
                limits=options.limits,
                ssl_context=context,
            )
        except OSError as exc:
            raise cannot_listen(options.host, options.port, exc) from None
        stop = _stop_event()
        tls = " (TLS)" if context else ""
        auth = ", token required" if token else ""
        print(f"psyq server listening on {host}:{port}{tls}", flush=True)
        loop = loop_factory()[0]
        log.info("serving %s on %s:%d%s%s, %s loop", redact_url(url), host, port, tls, auth, loop)
        async with serving_health(options.health, backend.check_ready, lambda: not stop.is_set()):
            await stop.wait()
        log.info("shutting down: answering the calls already sent (up to %ss)", DRAIN_TIMEOUT_S)
        await server.drain(DRAIN_TIMEOUT_S)
        await server.close()
    finally:
        await release_backend(backend)
    return 0


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop
