"""`psyq server`: one engine (memory or SQLite) shared over TCP.

`Server` listens (TCP, TLS or a Unix socket), checks the token of each hello, sweeps idle
connections and keeps the count of answers waiting to be written across connections; each
connection is a `ServerConnection` (server_connection.py), which holds the per-connection
limits (`ServerLimits`) and runs the requests.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from psyq.backends.base import BackendAdapter
from psyq.backends.engine.pacing import unpace
from psyq.backends.server.commands import signatures
from psyq.backends.server.server_connection import ServerConnection, ServerLimits

__all__ = ["DRAIN_TIMEOUT_S", "Server", "serve"]

DRAIN_TIMEOUT_S = 5.0  # how long a graceful stop waits for the clients' calls to finish


class Server:
    """The engine `backend` behind a TCP listener. `start()`, then `close()`."""

    def __init__(
        self,
        backend: BackendAdapter,
        *,
        token: str | None = None,
        limits: ServerLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        peer_check: Callable[[socket.socket], str | None] | None = None,
        hello_info: dict[str, Any] | None = None,
    ) -> None:
        """`peer_check(sock)`: why a new connection's peer is refused (None: accepted);
        `hello_info`: more entries for the hello answer (what the client checks)."""
        self.backend = backend
        unpace(backend)  # a connection's requests run at once, in the order they came
        self.token = token
        self.limits = limits or ServerLimits()
        self.ssl_context = ssl_context
        self.peer_check = peer_check
        self.hello_info = hello_info or {}
        self.signatures = signatures()
        self.connections: set[ServerConnection] = set()
        self.unsent = 0  # bytes waiting to be written on connections paused for writing
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self.leaving = False  # drain() began: a connection accepted from now on is refused

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 = a free port); returns the bound address."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self), host, port, ssl=self.ssl_context
        )
        address = self._server.sockets[0].getsockname()
        self._start_sweeping()
        return str(address[0]), int(address[1])

    async def start_unix(self, path: str) -> None:
        """Listen on the Unix socket `path` (a leading NUL: Linux's abstract namespace). A
        socket file is made readable by this user alone."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)  # bound here: uvloop refuses an abstract address given as a path
            if not path.startswith("\0"):
                os.chmod(path, 0o600)
        except OSError:
            sock.close()
            raise
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: ServerConnection(self), sock=sock)
        self._start_sweeping()

    def _start_sweeping(self) -> None:
        if self.limits.idle_timeout > 0:
            self._sweep()

    def _sweep(self) -> None:
        """Close the connections idle for `idle_timeout`; runs every quarter of it (one
        timer for the server, nothing per request)."""
        now = asyncio.get_running_loop().time()
        for conn in list(self.connections):
            conn.close_if_idle(now, self.limits.idle_timeout)
        period = self.limits.idle_timeout / 4
        self._sweeper = asyncio.get_running_loop().call_later(period, self._sweep)

    async def drain(self, timeout: float) -> None:
        """Go away cleanly, up to `close()`: accept no more connections, and let each one
        finish what its client sent (ServerConnection.leave: a version 4 client is told and
        half-closes; the requests read are answered). A connection not drained within
        `timeout` seconds is aborted, so nothing runs after this returns."""
        self.leaving = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        for conn in conns:
            conn.leave()
        waiting = [conn.drained for conn in conns if conn.drained is not None]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout)
        for conn in list(self.connections):  # with any the listener accepted as it closed
            if conn.drained is None or not conn.drained.done():
                conn.abort()

    async def close(self) -> None:
        """Close every connection: one drained (`drain`) after its answers are written,
        the others at once (their calls fail with ConnectionError)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.finish()
        if self._server is not None:
            await self._server.wait_closed()

    def descriptors(self) -> list[int]:
        """The file descriptors of its listening sockets and connections (what a process
        forked from this one lets go of: sqlite/sharing/server.py)."""
        found = [sock.fileno() for sock in self._server.sockets] if self._server else []
        for conn in self.connections:
            transport = conn.transport
            sock = None if transport is None else transport.get_extra_info("socket")
            if sock is not None:
                found.append(sock.fileno())
        return found

    def check_token(self, given: Any) -> bool:
        if self.token is None:
            return True
        if type(given) is not str:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())


async def serve(
    backend: BackendAdapter,
    host: str,
    port: int,
    *,
    token: str | None = None,
    limits: ServerLimits | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[Server, tuple[str, int]]:
    """Start a server for `backend`; returns it and its bound address."""
    server = Server(backend, token=token, limits=limits, ssl_context=ssl_context)
    return server, await server.start(host, port)
