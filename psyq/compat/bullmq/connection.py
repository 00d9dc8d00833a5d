"""Where a `bullmq` options dict says the queues live, as a psyq URL.

`backend: "postgres"` reads `bullmq`'s Postgres options (`connection` as a libpq conninfo
string, a URL or a dict, `schema`: postgres_options.py). Otherwise
(`backend` absent or `"redis"`) `connection` may be a URL (any psyq backend: `redis://`,
`sqlite:///`, `psyq://`, `postgresql://`, `memory://`), a dict
`{host, port, db, username, password, ssl}` (or ioredis's Sentinel options `{sentinels:
[{host, port}], name, ...}`) or a redis-py client (both mean Redis). Without
one: `PSYQ_URL` when set, else `redis://localhost:6379`, as the `bullmq` package does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from psyq.backends.postgres.config import SCHEMES as POSTGRES_SCHEMES
from psyq.compat.bullmq.postgres_options import postgres_url
from psyq.errors import InvalidOptionsError, InvalidURLError, redact_url
from psyq.rules.prefix import DEFAULT_PREFIX

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
    if prefix not in (None, DEFAULT_PREFIX):
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
    if opts.get("sentinels"):
        return _sentinel_url(opts)
    host = opts.get("host") or "localhost"
    port = int(opts.get("port") or 6379)
    db = int(opts.get("db") or 0)
    return (
        f"{_scheme(opts)}://{_auth(opts.get('username'), opts.get('password'))}{host}:{port}/{db}"
    )


def _scheme(opts: Mapping[str, Any], tail: str = "") -> str:
    return ("rediss" if opts.get("ssl") or opts.get("tls") else "redis") + tail


def _auth(user: Any, password: Any) -> str:
    """`user:password@` for a URL (empty when neither is given)."""
    if password:
        return f"{quote(str(user or ''), safe='')}:{quote(str(password), safe='')}@"
    return f"{quote(str(user), safe='')}@" if user else ""


def _sentinel_url(opts: Mapping[str, Any]) -> str:
    """ioredis's Sentinel options, `{sentinels: [{host, port}], name, db, username,
    password, sentinelUsername, sentinelPassword, tls}`, as a `redis+sentinel://` URL."""
    name = opts.get("name")
    if not name:
        raise InvalidOptionsError(
            "a connection with sentinels needs the name of the primary they monitor (name)",
            option="name",
        )
    hosts = ",".join(
        f"{s.get('host') or 'localhost'}:{int(s.get('port') or 26379)}" for s in opts["sentinels"]
    )
    auth = _auth(opts.get("username"), opts.get("password"))
    query = {
        "sentinel_username": opts.get("sentinelUsername"),
        "sentinel_password": opts.get("sentinelPassword"),
    }
    tail = urlencode({key: value for key, value in query.items() if value})
    db = int(opts.get("db") or 0)
    return f"{_scheme(opts, '+sentinel')}://{auth}{hosts}/{quote(str(name), safe='')}/{db}" + (
        f"?{tail}" if tail else ""
    )
