"""`psyq worker module:function`: run a Worker until SIGTERM/SIGINT.

The first signal closes gracefully (active jobs finish, nothing new is taken); a second one
forces the close (active jobs go back to waiting at once).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import psyq
from psyq.backends import resolve_url
from psyq.cli.common import CliError
from psyq.cli.health import HealthOptions, serving_health
from psyq.cli.loop import loop_factory, run
from psyq.errors import redact_url

__all__ = ["load_processor", "run_worker"]

log = logging.getLogger("psyq.worker")


def load_processor(spec: str) -> Callable[..., Any]:
    """Import `module:function` (the current directory is importable, as with celery)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"processor must look like module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"cannot import module {module_name!r}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise CliError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise CliError(f"{spec!r} is not callable (it is {type(target).__name__})")
    return target  # type: ignore[no-any-return]


def run_worker(
    spec: str,
    queue: str,
    connection: str | None,
    concurrency: int,
    prefix: str,
    health: HealthOptions | None = None,
) -> int:
    processor = load_processor(spec)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return run(_serve(processor, queue, connection, concurrency, prefix, health or HealthOptions()))


async def _serve(
    processor: Callable[..., Any],
    queue: str,
    connection: str | None,
    concurrency: int,
    prefix: str,
    health: HealthOptions,
) -> int:
    worker = psyq.Worker(
        queue,
        processor,
        connection=connection,
        concurrency=concurrency,
        prefix=prefix,
        autorun=False,
    )
    worker.on("failed", lambda job, error: log.warning("job %s failed: %r", job.id, error))
    worker.on("error", lambda error: log.error("worker error: %r", error))
    url = redact_url(resolve_url(connection))
    _on_signals(worker)
    log.info(
        "worker %s on queue %r at %s, concurrency %d, %s loop",
        worker.id,
        queue,
        url,
        concurrency,
        loop_factory()[0],
    )
    probe = psyq.Queue(queue, connection=connection, prefix=prefix)  # asks the store's counts
    try:
        async with serving_health(health, lambda: _ask(probe), lambda: _taking(worker)):
            await worker.run()
            await worker.close()
    finally:
        await probe.close()
    log.info("worker %s stopped", worker.id)
    return 0


async def _ask(queue: psyq.Queue) -> None:
    """One cheap call to the store: does it answer?"""
    await queue.get_job_counts("active")


def _taking(worker: psyq.Worker) -> bool:
    return worker.is_running() and not worker.paused


def _on_signals(worker: psyq.Worker) -> None:
    loop = asyncio.get_running_loop()
    signals_seen = 0
    closing: set[asyncio.Task[None]] = set()

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        force = signals_seen > 1
        name = signal.Signals(signum).name
        log.info("%s: shutting down%s", name, " now (force)" if force else " after active jobs")
        task = loop.create_task(worker.close(force=force))
        closing.add(task)
        task.add_done_callback(closing.discard)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
