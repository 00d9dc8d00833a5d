"""`psyq server` and its client backend `psyq://`: the native engine shared over TCP.

protocol.py: frames, the MessagePack codec and the command allow-list (both ends);
adding.py: adds of one loop turn in one request (protocol 2); settings.py: the URL;
commands.py: argument checks; server.py: the asyncio server; client.py: the adapter."""

from psyq.backends.tcp.client import TcpBackend, open_tcp_backend, parse_psyq_url
from psyq.backends.tcp.protocol import PROTOCOL_VERSION, ProtocolError
from psyq.backends.tcp.server import Server, ServerLimits, serve

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
