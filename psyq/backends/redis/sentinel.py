"""Clients of a Redis primary found through Sentinels (`redis+sentinel://`).

redis-py's Sentinel client opens connections on demand: to the primary, and to each
Sentinel it asks where the primary is. Two ways leave one open after the client closed,
until its event loop is gone: a call still running at the close (one retrying after a
failover, one asking a Sentinel) connects again afterwards; and closing awaits each
socket's close, pool after pool (the primary's, then each Sentinel's), so a close that
fails or is cancelled half-way leaves the rest open. Here every connection of one client
belongs to one `Shutter`, which holds each while it is connected: closing the client
disconnects them all without awaiting anything, and from then on none connects again (the
call gets a ConnectionError).

A Sentinel that is down costs one quick try: its connections have no retries (redis-py's
default retries each command three times with a backoff of about a second, so a dead first
Sentinel held every discovery, a client's first call and each reconnect after a failover,
for 3.4 s before the next Sentinel was asked) and short connect and reply timeouts (a
Sentinel answers at once; one that does not is skipped for the next).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from psyq.backends.redis.settings import SentinelSettings

__all__ = ["close_sentinel_client", "new_sentinel_client"]

_SENTINEL: Any = Sentinel  # redis-py's Sentinel is untyped
SENTINEL_CONNECT_TIMEOUT_S = 0.5  # a Sentinel's connect, then each of its replies
SENTINEL_REPLY_TIMEOUT_S = 1.0


def sentinel_connection_options() -> dict[str, Any]:
    """How a Sentinel is reached: one try, short timeouts (the next Sentinel is asked)."""
    return {
        "retry": Retry(NoBackoff(), 0),
        "socket_connect_timeout": SENTINEL_CONNECT_TIMEOUT_S,
        "socket_timeout": SENTINEL_REPLY_TIMEOUT_S,
    }


class Shutter:
    """The connections of one client that are connected; closed with the client."""

    def __init__(self) -> None:
        self.closed = False
        self.connected: set[Any] = set()

    async def close(self) -> None:
        """Disconnect every connection of the client. Without waiting for the sockets to
        finish closing, no step awaits: a cancel cannot stop it half-way."""
        self.closed = True  # one connecting now disconnects itself (connect_check_health)
        connected, self.connected = self.connected, set()
        for conn in connected:
            await conn.disconnect(nowait=True)


class _ShutWithClient:
    """A redis-py connection held by its client's `Shutter` while it is connected."""

    def __init__(self, *, shutter: Shutter, **options: Any) -> None:
        self._shutter = shutter
        super().__init__(**options)

    async def connect(self) -> None:
        self._refuse_if_closed()  # before a primary's connection asks the Sentinels
        await super().connect()  # type: ignore[misc]

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        # every connect of redis-py's connections (connect(), a send on a lost one) ends here
        self._refuse_if_closed()
        try:
            await super().connect_check_health(*args, **kwargs)  # type: ignore[misc]
        finally:
            if self.is_connected:  # type: ignore[attr-defined]
                self._shutter.connected.add(self)
            if self._shutter.closed:  # closed while this one connected
                await self.disconnect()
        self._refuse_if_closed()

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._shutter.connected.discard(self)
        await super().disconnect(*args, **kwargs)  # type: ignore[misc]

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        with self._refused_once_closed():
            await super().send_packed_command(*args, **kwargs)  # type: ignore[misc]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        with self._refused_once_closed():
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]

    @contextlib.contextmanager
    def _refused_once_closed(self) -> Iterator[None]:
        """A call in flight when the client closes meets its connection disconnected under
        it (redis-py then fails on the socket it dropped, AttributeError): refused as any
        call after the close is."""
        try:
            yield
        except AttributeError:
            if not self._shutter.closed:
                raise
            raise RedisConnectionError("the Sentinel client is closed") from None

    def _refuse_if_closed(self) -> None:
        if self._shutter.closed:
            raise RedisConnectionError("the Sentinel client is closed")


class _Primary(_ShutWithClient, SentinelManagedConnection):
    pass


class _PrimaryTLS(_ShutWithClient, SentinelManagedSSLConnection):
    pass


class _Watcher(_ShutWithClient, Connection):
    pass


class _WatcherTLS(_ShutWithClient, SSLConnection):
    pass


_SHUT_WITH_CLIENT: dict[type, type] = {
    SentinelManagedConnection: _Primary,
    SentinelManagedSSLConnection: _PrimaryTLS,
    Connection: _Watcher,
    SSLConnection: _WatcherTLS,
}


def _shut_with(pool: Any, shutter: Shutter) -> None:
    """Make the connections `pool` opens from now on close with `shutter`."""
    pool.connection_class = _SHUT_WITH_CLIENT[pool.connection_class]
    pool.connection_kwargs["shutter"] = shutter


def new_sentinel_client(settings: SentinelSettings, **options: Any) -> Any:
    """A client of the primary the Sentinels name (`options` go to its pool): each new
    connection asks them where it is, so after a failover the next call reaches the
    promoted replica. `close_sentinel_client` closes it and every connection it opens."""
    sentinel = _SENTINEL(
        settings.sentinels,
        sentinel_kwargs={
            "decode_responses": True,
            **sentinel_connection_options(),
            **settings.sentinel_options,
        },
        decode_responses=True,
        **settings.node_options,
    )
    shutter = Shutter()
    for watcher in sentinel.sentinels:
        _shut_with(watcher.connection_pool, shutter)
    client = sentinel.master_for(settings.service, **options)
    _shut_with(client.connection_pool, shutter)
    return client


async def close_sentinel_client(client: Any) -> None:
    """Close a client of `new_sentinel_client`: every connection it has to the primary and
    to the Sentinels, in its pools or not, and any a call still running would open."""
    pool = client.connection_pool
    await pool.connection_kwargs["shutter"].close()
    await client.aclose()
    for watcher in pool.sentinel_manager.sentinels:
        await watcher.aclose()
