"""The owner of a `sqlite:///` file serves it to the other processes of its host.

The owner runs psyq's server (server/server.py) for its open Database on a local Unix socket,
on a daemon thread with its own event loop: the Database is process-wide and thread-safe,
the server outlives any one event loop of the application (an `asyncio.run` that ends), and
nothing runs on the owner's own calls (they never pass through the socket).

The socket is named from the file's device and inode, so every path to the file finds it.
On Linux it lives in the abstract namespace (no file left behind by a killed owner, no
108-byte path limit); elsewhere it is a file beside the database file the path resolves to.
Abstract sockets have no file permissions, so every connection's peer is checked with
SO_PEERCRED: the owner's user, or root.

A graceful close hands the file over with no failed call (`drain`, then `close`): the server
tells every peer it goes away (protocol 4's `bye`), answers every request a peer sent before
it half-closed, and only then does the owner flush and give the file up; the connections
close after that, which tells the waiting peers the file is free (client.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable

from psyq.backends.base import BackendAdapter
from psyq.backends.server.server import DRAIN_TIMEOUT_S, Server
from psyq.backends.sqlite.sharing.owner import Identity, blank_descriptor

__all__ = ["Sharer", "peer_refusal", "share_address"]

log = logging.getLogger("psyq.sqlite")

START_TIMEOUT_S = 10.0  # how long opening a file waits for its server to listen
STOP_TIMEOUT_S = 5.0


def share_address(path: str, identity: Identity) -> str:
    """The socket the owner of the file `identity` (reached through `path`) listens on."""
    if sys.platform.startswith("linux"):
        return f"\0psyq-sqlite/{identity[0]}/{identity[1]}"
    return os.path.realpath(path) + ".sock"


def peer_refusal(sock: socket.socket) -> str | None:
    """Why the process at the other end of `sock` may not use the file (None: it may): only
    the owner's user and root may. Where SO_PEERCRED is missing the socket is a file of mode
    0600, which keeps other users out already."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    credentials = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", credentials)
    if uid in (os.getuid(), 0):
        return None
    return f"pid {pid} runs as uid {uid}; only uid {os.getuid()} (the owner's) or root may"


class Sharer:
    """The owner's server for its file, on a daemon thread. `close()` stops it."""

    def __init__(
        self, address: str, make_backend: Callable[[], BackendAdapter], info: dict[str, str]
    ) -> None:
        """`make_backend()` (called on the server's thread) gives the adapter served;
        `info` goes in every hello answer (the settings a client must agree with)."""
        self.address = address
        self._loop = _new_loop()
        self._server: Server | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None  # why it does not serve
        name = f"psyq-share {address.lstrip(chr(0))}"
        self._thread = threading.Thread(target=self._run, args=(make_backend, info), name=name)
        self._thread.daemon = True
        self._thread.start()
        self._ready.wait(START_TIMEOUT_S)
        if self.error is not None:
            log.error("psyq: cannot share %s with other processes: %r", address, self.error)

    def _run(self, make_backend: Callable[[], BackendAdapter], info: dict[str, str]) -> None:
        loop = self._loop
        try:
            loop.run_until_complete(self._start(make_backend, info))
        except Exception as exc:
            self.error = exc
            loop.close()
            return
        finally:
            self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _start(
        self, make_backend: Callable[[], BackendAdapter], info: dict[str, str]
    ) -> None:
        server = Server(make_backend(), peer_check=peer_refusal, hello_info=info)
        if not self.address.startswith("\0"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)  # a killed owner's; this process holds the file now
        await server.start_unix(self.address)
        self._server = server

    def let_go_in_child(self) -> None:
        """In a process forked from the owner: let go of the inherited sockets (a listener
        kept open here would keep the address taken after the parent's exit, and a
        connection would not close when the parent closes it), and serve nothing. The
        thread serving them is the parent's: it does not run here."""
        server, self._server = self._server, None
        for fd in server.descriptors() if server is not None else ():
            blank_descriptor(fd)

    def drain(self) -> None:
        """Stop taking connections and let the peers finish (Server.drain): every request a
        peer sent is answered, and no more will come. Call before the owner's last flush."""
        server = self._server
        if server is None or not self._thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(server.drain(DRAIN_TIMEOUT_S), self._loop)
        done.result(DRAIN_TIMEOUT_S + STOP_TIMEOUT_S)

    def close(self) -> None:
        """Stop serving: every connection closes; a drained one after its answers are
        written, any other at once (its calls fail with ConnectionError)."""
        server, self._server = self._server, None
        if server is None or not self._thread.is_alive():
            return
        done = asyncio.run_coroutine_threadsafe(server.close(), self._loop)
        try:
            done.result(STOP_TIMEOUT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STOP_TIMEOUT_S)
            if not self.address.startswith("\0"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.address)


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (as `psyq server` runs), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
