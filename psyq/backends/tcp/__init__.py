"""`psyq server` and its client backend `psyq://`: the native engine shared over TCP.

Both ends: protocol.py the protocol's words (versions, limits, commands, its error);
fields.py how each record travels; codec.py packing and unpacking; framing.py received
bytes into frames; outbox.py frames out in batches; adding.py adds of one loop turn in one
request (protocol 2). settings.py: the URL; commands.py: argument checks; server.py: the
asyncio server; connection.py: the client's connection; client.py: the adapter."""

from psyq.backends.tcp.client import TcpBackend, open_tcp_backend
from psyq.backends.tcp.protocol import PROTOCOL_VERSION, ProtocolError
from psyq.backends.tcp.server import Server, serve
from psyq.backends.tcp.server_connection import ServerLimits
from psyq.backends.tcp.settings import parse_psyq_url

__all__ = [
    "PROTOCOL_VERSION",
    "ProtocolError",
    "Server",
    "ServerLimits",
    "TcpBackend",
    "open_tcp_backend",
    "parse_psyq_url",
    "serve",
]
