"""Where a `bullmq` options dict says the queues live, as a psyq URL.

`backend: "postgres"` reads `bullmq`'s Postgres options (`connection` as a libpq conninfo
string, a URL or a dict, `schema`: postgres_options.py). Otherwise
(`backend` absent or `"redis"`) `connection` may be a URL (any psyq backend: `redis://`,
`sqlite:///`, `psyq://`, `postgresql://`, `memory://`), a dict
`{host, port, db, username, password, ssl}` or a redis-py client (both mean Redis). Without
one: `PSYQ_URL` when set, else `redis://localhost:6379`, as the `bullmq` package does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from psyq.backends.postgres.config import SCHEMES as POSTGRES_SCHEMES
from psyq.compat.bullmq.postgres_options import postgres_url
from psyq.errors import InvalidOptionsError, InvalidURLError, redact_url

__all__ = ["DEFAULT_REDIS_URL", "connection_url", "store_url"]

DEFAULT_REDIS_URL = "redis://localhost:6379"
BACKENDS = ("redis", "postgres")
POSTGRES_OPTIONS = ("schema",)


def store_url(opts: Mapping[str, Any]) -> str:
    """The psyq URL of the store a `bullmq` options dict (`backend`, `connection`,
    `schema`, `skipVersionCheck`, `prefix`) names; an option the store cannot honour is
    refused, by name."""
    backend = opts.get("backend")
    if backend not in (None, *BACKENDS):
        raise InvalidOptionsError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}",
            option="backend",
        )
    _check_skip_version_check(opts.get("skipVersionCheck", False))
    if backend == "postgres":
        _check_postgres_prefix(opts.get("prefix"))
        return postgres_url(opts.get("connection"), opts.get("schema"))
    url = connection_url(opts.get("connection"))
    if urlsplit(url).scheme in POSTGRES_SCHEMES:
        return postgres_url(url, opts.get("schema"))
    misplaced = [option for option in POSTGRES_OPTIONS if option in opts]
    if misplaced:
        option = misplaced[0]
        raise InvalidOptionsError(
            f"{option}={opts[option]!r} applies to a Postgres store only (backend "
            f"'postgres'), not to {redact_url(url)!r}",
            option=option,
        )
    return url


def _check_skip_version_check(value: Any) -> None:
    """`skipVersionCheck` (any store): `bullmq` skips its check of the server's version
    (Redis's, Postgres's major); psyq's stores make no such check, so either bool is
    honoured."""
    if not isinstance(value, bool):
        raise InvalidOptionsError(
            f"skipVersionCheck must be true or false, got {value!r}", option="skipVersionCheck"
        )


def _check_postgres_prefix(prefix: Any) -> None:
    """On Postgres the schema, not a key prefix, separates namespaces (as in `bullmq`)."""
    if prefix not in (None, "bull"):
        raise InvalidOptionsError(
            f"prefix {prefix!r} does not apply to backend 'postgres': queues are named "
            "without a prefix there; use the schema option to separate namespaces",
            option="prefix",
        )


def connection_url(connection: Any) -> str:
    """The psyq URL a `bullmq` `connection` option stands for."""
    if connection is None or (isinstance(connection, Mapping) and not connection):
        return os.environ.get("PSYQ_URL") or DEFAULT_REDIS_URL
    if isinstance(connection, str):
        if "://" not in connection:
            raise InvalidURLError(
                connection,
                "a connection URL needs a scheme, e.g. redis://; a libpq conninfo string "
                "('host=... dbname=...') needs the option backend: 'postgres'",
            )
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
