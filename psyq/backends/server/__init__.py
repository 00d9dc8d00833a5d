"""`psyq server` and its client backend `psyq://`: the engine shared over TCP.

Both ends: protocol.py the protocol's words (versions, limits, commands, its error);
fields.py how each record travels; codec.py packing and unpacking; framing.py received
bytes into frames; outbox.py frames out in batches; adding.py adds of one loop turn in one
request (protocol 2). settings.py: the URL; commands.py: argument checks; server.py: the
asyncio server; connection.py: the client's connection; client.py: the adapter;
generated.py: the commands and the client's forwarders, written from the contract by
generate.py."""

from psyq.backends.server.client import ServerBackend, open_server_backend
from psyq.backends.server.protocol import PROTOCOL_VERSION, ProtocolError
from psyq.backends.server.server import Server, serve
from psyq.backends.server.server_connection import ServerLimits
from psyq.backends.server.settings import parse_psyq_url

__all__ = [
    "PROTOCOL_VERSION",
    "ProtocolError",
    "Server",
    "ServerBackend",
    "ServerLimits",
    "open_server_backend",
    "parse_psyq_url",
    "serve",
]
