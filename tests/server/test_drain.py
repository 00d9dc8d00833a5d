"""A server going away (`Server.drain`, the embedded owner's handover) serves nothing after
drain returns: a connection its listener accepted as it closed is refused, not served
beside the owner closing its file (a peer starting as the owner exited crashed it:
CI, 2026-11-28, tests/sqlite/test_shared.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from psyq.backends import open_backend, release_backend
from psyq.backends.server.codec import frame
from psyq.backends.server.protocol import PROTOCOL_VERSION
from psyq.backends.server.server import Server
from psyq.backends.server.server_connection import ServerConnection


async def read_all(reader: asyncio.StreamReader) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), 5)
    except ConnectionError:  # reset, or a broken pipe found by the write before
        return b""


async def test_a_connection_accepted_as_the_server_drains_is_refused() -> None:
    backend = await open_backend("memory://")
    server = Server(backend)
    await server.start("127.0.0.1", 0)
    ours, theirs = socket.socketpair()
    try:
        await server.drain(1)
        loop = asyncio.get_running_loop()
        _, conn = await loop.connect_accepted_socket(lambda: ServerConnection(server), ours)
        reader, writer = await asyncio.open_connection(sock=theirs)
        with contextlib.suppress(ConnectionError):  # closed already
            writer.write(frame({"id": 1, "op": "hello", "args": [PROTOCOL_VERSION, None]}))
        assert await read_all(reader) == b""  # no answer: closed at once
        assert conn not in server.connections
        writer.close()
    finally:
        await server.close()
        await release_backend(backend)
