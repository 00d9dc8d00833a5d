"""`sqlite:///F` in a process that does not own F: the owner's engine, through its socket.

The `sqlite` scheme's factory tries to own the file (the `flock` decides, so two processes
opening at once agree on one owner). The owner runs the engine in its own process and
serves it on a local socket (server.py); every other process gets a `PeerBackend`, psyq's
server client (server/client.py) connected to that socket, so it sees the same API and the same
errors as the owner.

Takeover: each time a peer connects (its first call, or after its connection dropped) it
first tries to own the file. While the owner lives that fails at once; once the owner exited
or died, the OS dropped its lock and the first peer to try gets it: it recovers the file as
a fresh open does (after a kill, active jobs come back through the stalled check; after a
graceful exit they stay locked HANDOVER_LOCK_MS for the peers' workers) and serves it from its
own process, and the others reconnect to it. From then on the PeerBackend that took the file
runs its own calls on the engine, as the owner that opened the file does (not through its
own socket); the calls already sent are answered through it. The calls in flight when the
owner died fail with `psyq.ConnectionError` (the owner's commits decide what they did); a
peer that cannot reach an owner within CONNECT_TIMEOUT_S raises `psyq.ConnectionError`
naming the file.

A peer keeps to the file it reached first: once the path names no file or another one (the
file moved, deleted or replaced), every call raises PsyqError saying so, and it never takes
over a new file there. A process forked after a peer connected refuses the peer's calls in
the child (its connections are the parent's: `_after_fork_in_child`).

A graceful close hands over without a failed call or the reconnect backoff (server.py): the
owner says `bye` and answers every call a peer sent before the peer half-closed; new calls
wait for that connection to close, which the owner does once it gave the file up, then try
to take it at once; the peers that lose try the new owner's socket every HANDOVER_POLL_S
while it opens the file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import weakref
from collections.abc import Sequence
from typing import Any

from psyq.backends.base import BackendAdapter, JobRecord, NewJob
from psyq.backends.server.client import ServerBackend
from psyq.backends.server.connection import ClientConnection
from psyq.backends.sqlite.backend import (
    SHARED_SETTINGS,
    SqliteBackend,
    open_sqlite_file,
    parse_sqlite_url,
    start_sharing,
)
from psyq.backends.sqlite.database import Database
from psyq.backends.sqlite.lifecycle import release_database
from psyq.backends.sqlite.sharing.owner import FileInUse, Identity, blank_descriptor, file_identity
from psyq.backends.sqlite.sharing.server import share_address
from psyq.errors import ConnectionError, PsyqError

__all__ = ["CONNECT_TIMEOUT_S", "PeerBackend", "open_sqlite_backend"]

log = logging.getLogger("psyq.sqlite")

CONNECT_TIMEOUT_S = 10.0  # how long a call keeps trying to reach (or become) the owner
HANDOVER_WAIT_S = 4.0  # after a bye: for the old owner to close, then for the new to listen
HANDOVER_POLL_S = 0.005  # after a bye: between tries of the new owner's socket
# After a graceful handover the jobs active in the file are the peers' (the old owner's
# workers closed): their locks last this long (a Worker's default lock_duration) for their
# workers to extend them, instead of being returned by the first stalled check.
HANDOVER_LOCK_MS = 30_000


class PeerBackend(ServerBackend):
    """A `sqlite:///` file owned by another process of this host, reached through it."""

    kind = "sqlite"

    def __init__(self, url: str) -> None:
        path, settings = parse_sqlite_url(url)
        super().__init__(f"psyq://localhost?connect_timeout={CONNECT_TIMEOUT_S}")
        self.url = url
        self.path = path
        self.settings.safe_url = url
        self._wanted = {name: settings[name] for name in SHARED_SETTINGS}
        self._db: Database | None = None  # the file, once this process took it over
        self._handover: ClientConnection | None = None  # a connection whose owner said bye
        self._local: SqliteBackend | None = None  # the engine, once this process took over
        self._identity = file_identity(path)  # the file this process reaches, for good
        self._forked: PsyqError | None = None  # why not: opened before this process forked
        _PEERS.add(self)

    async def close(self) -> None:
        if self._forked is not None:
            return  # the connection and the file are the parent's
        await super().close()
        self._local = None
        db, self._db = self._db, None
        if db is not None:
            release_database(db)

    def _left(self, conn: ClientConnection) -> None:
        self._handover = conn  # the owner hands the file over
        super()._left(conn)

    async def _open_connection(self) -> ClientConnection:
        """A connection to the file's owner, this process when it could take the file. After
        the owner said bye: once it gave the file up (it then closes the connection), tried
        every HANDOVER_POLL_S while another peer takes the file over."""
        handover = self._handover
        if handover is None:
            return await self._reach_owner()
        await asyncio.wait([handover.lost], timeout=HANDOVER_WAIT_S)
        deadline = time.monotonic() + HANDOVER_WAIT_S
        while True:
            try:
                conn = await self._reach_owner()
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(HANDOVER_POLL_S)  # the new owner opens the file
                continue
            if self._handover is handover:
                self._handover = None
            return conn

    async def _reach_owner(self) -> ClientConnection:
        identity = self._same_file()
        self._take_over()
        loop = asyncio.get_running_loop()
        address = share_address(self.path, identity)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)  # a local socket connects at once, or is refused
        except OSError as exc:
            sock.close()
            reason = f"its owner does not answer on its local socket ({exc.strerror or exc})"
            raise ConnectionError(self.url, reason) from None
        sock.setblocking(False)
        # given a socket: uvloop refuses an abstract address given as a path
        closed = (
            "the connection to its owner closed (the owner exited or stopped sharing the "
            "file); whether this call took effect is unknown, the next call reconnects"
        )
        _, conn = await loop.create_unix_connection(
            lambda: ClientConnection(self.url, closed=closed), sock=sock
        )
        return conn

    def _same_file(self) -> Identity:
        """The file's identity, while the path names the file this process reached first;
        else the error saying it does not (a file moved, deleted or replaced under its
        processes is never taken over as a new one)."""
        identity = file_identity(self.path)
        if identity is not None and identity == self._identity:
            return identity
        what = "moved or deleted" if identity is None else "replaced by another file"
        raise PsyqError(
            f"{self.path} was {what} while this process used it: nothing more is "
            "acknowledged until the file is restored or the process restarts (it then "
            "opens the file the path names)"
        )

    def _take_over(self) -> None:
        """Own the file when no process does any more (its owner exited or died)."""
        if self._db is not None:
            return
        try:
            db = open_sqlite_file(self.url, create=False)
        except FileInUse:
            return
        if db.owner.identity != self._identity:  # replaced since _same_file
            release_database(db)
            self._same_file()
        self._db = db
        log.warning("psyq: %s had no owner left; this process (its peer) took it over", self.path)
        if self._handover is not None:  # its owner closed: the active jobs are the peers'
            self._db.hold_active(HANDOVER_LOCK_MS)
        start_sharing(self._db, self.url)
        local = SqliteBackend(self.url)
        local.attach(self._db)  # released by close(), not by `local`
        self._local = local

    async def _call(self, op: str, *args: Any) -> Any:
        """On the engine once this process owns the file, else through the owner's socket
        (closed: the socket path raises ClosedError)."""
        if self._forked is not None:
            raise PsyqError(str(self._forked))
        local = self._local
        if local is None or self._closed:
            return await super()._call(op, *args)
        return await getattr(local, op)(*args)

    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        if self._forked is not None:
            raise PsyqError(str(self._forked))
        local = self._local
        if local is None or self._closed:
            return await super().add_jobs(queue, jobs)
        return await local.add_jobs(queue, jobs)

    def _check_hello(self, answer: Any) -> None:
        theirs = {name: answer.get(name) for name in SHARED_SETTINGS}
        if theirs != self._wanted:
            raise PsyqError(
                f"{self.path} is owned by another process with {_shown(theirs)}; this URL "
                f"asks for {_shown(self._wanted)}: give every process the same settings"
            )


_PEERS: weakref.WeakSet[PeerBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """Every peer a forked child inherited is its parent's: each refuses its calls, and
    lets go of its connections (so they close when the parent closes them)."""
    for peer in list(_PEERS):
        peer._forked = PsyqError(
            f"{peer.path} was opened before this process forked (by its parent): a forked "
            "child cannot use its parent's connection to the file; open the Queue or "
            "Worker after the fork, in the child"
        )
        for conn in {*peer._conns, peer._adding} - {None}:
            transport = None if conn is None else conn.transport
            sock = None if transport is None else transport.get_extra_info("socket")
            if sock is not None:
                blank_descriptor(sock.fileno())
    _PEERS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _shown(settings: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in settings.items())


def open_sqlite_backend(url: str) -> BackendAdapter:
    """Entry point of the `sqlite` scheme: the engine when this process owns (or can own)
    the file, else a peer of the process that does (none with ?share=off)."""
    if parse_sqlite_url(url)[1]["share"] == "off":
        return SqliteBackend(url)
    try:
        db = open_sqlite_file(url)
    except FileInUse:
        return PeerBackend(url)
    return SqliteBackend(url, db)
