"""Where a `bullmq` options dict says the queues live, as a psyq URL.

`connection` may be a URL (any psyq backend: `redis://`, `sqlite:///`, `psyq://`,
`postgresql://`, `memory://`), a dict `{host, port, db, username, password, ssl}` or a
redis-py client (both mean Redis). Without one: `PSYQ_URL` when set, else
`redis://localhost:6379`, as the `bullmq` package does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from psyq.errors import InvalidURLError

__all__ = ["DEFAULT_REDIS_URL", "connection_url"]

DEFAULT_REDIS_URL = "redis://localhost:6379"


def connection_url(connection: Any) -> str:
    """The psyq URL a `bullmq` `connection` option stands for."""
    if connection is None or (isinstance(connection, Mapping) and not connection):
        return os.environ.get("PSYQ_URL") or DEFAULT_REDIS_URL
    if isinstance(connection, str):
        if "://" not in connection:
            raise InvalidURLError(connection, "a connection URL needs a scheme, e.g. redis://")
        return connection
    if isinstance(connection, Mapping):
        return _redis_url(connection)
    pool = getattr(connection, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(kwargs, Mapping):
        return _redis_url(kwargs)
    raise InvalidURLError(
        repr(connection),
        "a connection is a URL, a dict {host, port, db, password} or a redis-py client",
    )


def _redis_url(opts: Mapping[str, Any]) -> str:
    if opts.get("url"):
        return str(opts["url"])
    host = opts.get("host") or "localhost"
    port = int(opts.get("port") or 6379)
    db = int(opts.get("db") or 0)
    user, password = opts.get("username"), opts.get("password")
    auth = ""
    if password:
        auth = f"{quote(str(user or ''), safe='')}:{quote(str(password), safe='')}@"
    elif user:
        auth = f"{quote(str(user), safe='')}@"
    scheme = "rediss" if opts.get("ssl") or opts.get("tls") else "redis"
    return f"{scheme}://{auth}{host}:{port}/{db}"
