"""Liveness and readiness probes of the long-running commands (`psyq worker`, `psyq server`,
`psyq dashboard` with `--health-port N`): a small HTTP server on the command's own event
loop, so a loop that does not turn does not answer at all.

- `GET /healthz` (live): 200 while the event loop turns; 503 when a tick the loop owes is
  later than the stall limit (the loop is starved: a blocking call in a processor, a CPU
  bound callback). A loop blocked outright answers nothing: the probe's own timeout fails.
- `GET /readyz` (ready): 200 once the command is taking work (a worker running and not
  paused, a server listening) and its store answered within the unreachable limit; 503
  with the reason otherwise (not started yet, closing, the store unreachable or unable to
  take changes since ...).

The store is asked every `every_s` seconds (`probe`, a cheap call: a worker's queue counts,
the server's `check_ready`: its file is still the one opened and its last write wrote)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from psyq.cli.common import cannot_listen

__all__ = [
    "Health",
    "HealthLimits",
    "HealthOptions",
    "add_health_arguments",
    "health_options",
    "serving_health",
]

log = logging.getLogger("psyq.health")

TICK_S = 0.2
STALL_S = 10.0
UNREACHABLE_S = 10.0
EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class HealthLimits:
    """`stall_s`: how late a loop tick may be before /healthz fails; `unreachable_s`: how
    long the store may not answer before /readyz fails; `every_s`: how often it is asked."""

    stall_s: float = STALL_S
    unreachable_s: float = UNREACHABLE_S
    every_s: float = EVERY_S


class Health:
    """The state both probes read, and the HTTP server that answers them."""

    def __init__(
        self,
        probe: Callable[[], Awaitable[object]],
        taking: Callable[[], bool],
        limits: HealthLimits | None = None,
    ) -> None:
        self._probe, self._taking = probe, taking
        self.limits = limits or HealthLimits()
        self._tick = time.monotonic()
        self._store_ok: float | None = None  # when the store last answered
        self._store_error = "not asked yet"
        self._tasks: list[asyncio.Task[None]] = []
        self._server: asyncio.Server | None = None

    # ------------------------------------------------------------------ state
    def live(self) -> tuple[bool, str]:
        late = time.monotonic() - self._tick - TICK_S
        if late > self.limits.stall_s:
            return False, f"event loop stalled: a tick is {late:.1f}s late"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        live, reason = self.live()
        if not live:
            return False, reason
        if not self._taking():
            return False, "not taking work (starting, paused or closing)"
        if self._store_ok is None:
            return False, f"the store has not answered yet: {self._store_error}"
        silent = time.monotonic() - self._store_ok
        if silent > self.limits.unreachable_s:
            return False, f"the store has failed for {silent:.1f}s: {self._store_error}"
        return True, "ok"

    # ------------------------------------------------------------------ tasks
    async def _ticks(self) -> None:
        while True:
            self._tick = time.monotonic()
            await asyncio.sleep(TICK_S)

    async def _asks(self) -> None:
        while True:
            await self._ask()
            await asyncio.sleep(self.limits.every_s)

    async def _ask(self) -> None:
        try:
            await asyncio.wait_for(self._probe(), self.limits.unreachable_s)
        except Exception as exc:  # any failure means "not ready": say which
            self._store_error = f"{type(exc).__name__}: {exc}"
            return
        self._store_ok, self._store_error = time.monotonic(), ""

    # ------------------------------------------------------------------ HTTP
    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0: a free port); returns the port."""
        self._tasks = [asyncio.ensure_future(self._ticks()), asyncio.ensure_future(self._asks())]
        self._server = await asyncio.start_server(self._answer, host, port)
        bound: int = self._server.sockets[0].getsockname()[1]
        log.info("health probes on http://%s:%d/healthz and /readyz", host, bound)
        return bound

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            path = request.split(b" ", 2)[1].split(b"?")[0] if b" " in request else b""
            status, text = self._status(path)
            body = text.encode() + b"\n"
            head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}"
            writer.write(head.encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass  # a probe that hung up or sent no request: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _status(self, path: bytes) -> tuple[str, str]:
        checks = {b"/healthz": self.live, b"/readyz": self.ready}
        check = checks.get(path)
        if check is None:
            return "404 Not Found", "GET /healthz (live) or /readyz (ready)"
        ok, reason = check()
        return ("200 OK" if ok else "503 Service Unavailable"), reason


@dataclass(frozen=True, slots=True)
class HealthOptions:
    """Where the probes listen (port None: no probes) and their limits."""

    host: str = "0.0.0.0"
    port: int | None = None
    limits: HealthLimits = HealthLimits()


def add_health_arguments(parser: argparse.ArgumentParser) -> None:
    """`--health-port` and its companions, the same on every long-running command."""
    group = parser.add_argument_group("health probes (GET /healthz, /readyz)")
    group.add_argument("--health-port", type=int, help="serve the probes on this port (off)")
    group.add_argument(
        "--health-host", default="0.0.0.0", help="address of the probes (0.0.0.0: the pod's)"
    )
    group.add_argument(
        "--health-unreachable",
        type=float,
        default=UNREACHABLE_S,
        help="seconds the store may not answer before /readyz fails (10)",
    )
    group.add_argument(
        "--health-stall",
        type=float,
        default=STALL_S,
        help="seconds the event loop may lag before /healthz fails (10)",
    )


def health_options(args: argparse.Namespace) -> HealthOptions:
    every = min(EVERY_S, args.health_unreachable / 2)
    limits = HealthLimits(args.health_stall, args.health_unreachable, every)
    return HealthOptions(args.health_host, args.health_port, limits)


@contextlib.asynccontextmanager
async def serving_health(
    options: HealthOptions,
    probe: Callable[[], Awaitable[object]],
    taking: Callable[[], bool],
) -> AsyncIterator[Health | None]:
    """The probes served while the block runs (nothing when no --health-port was given)."""
    if options.port is None:
        yield None
        return
    health = Health(probe, taking, options.limits)
    try:
        port = await health.start(options.host, options.port)
    except OSError as exc:
        raise cannot_listen(options.host, options.port, exc) from None
    print(f"health probes on {options.host}:{port}", flush=True)
    try:
        yield health
    finally:
        await health.close()
