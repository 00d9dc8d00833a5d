"""What a Redis backend URL says: redis-py's URL, the key prefix, cluster or not, the
Sentinels to ask for the primary, and how many replicas a write must reach."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from psyq.errors import InvalidURLError
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = [
    "DEFAULT_PREFIX",
    "RedisSettings",
    "SentinelSettings",
    "parse_redis_settings",
    "parse_redis_url",
]

SCHEMES = {
    "redis": "redis",
    "rediss": "rediss",
    "redis+cluster": "redis",
    "rediss+cluster": "rediss",
    "redis+sentinel": "redis",
    "rediss+sentinel": "rediss",
}
# psyq's own URL parameters (not redis-py's): taken out of the URL redis-py reads
_SENTINEL_PARAMS = ("sentinel_username", "sentinel_password")
_WAIT_PARAMS = ("wait_replicas", "wait_timeout")
DEFAULT_WAIT_TIMEOUT_MS = 1000


@dataclass(frozen=True, slots=True)
class SentinelSettings:
    """`redis+sentinel://[user:password@]host:port,host:port/<service>/<db>`: the Sentinels
    (`sentinel_username` / `sentinel_password` in the query authenticate to them), the
    service name they monitor, and what the data nodes get (db, the URL's user and password,
    TLS with `rediss+sentinel`)."""

    sentinels: list[tuple[str, int]]
    service: str
    node_options: dict[str, Any] = field(default_factory=dict)
    sentinel_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """What a psyq Redis URL says: redis-py's URL, the key prefix, and whether the server
    is a Redis Cluster (`redis+cluster://`, `rediss+cluster://`). `blocking_url` is `url`
    without a `socket_timeout`: blocking reads (BZPOPMIN, XREAD BLOCK) are bounded by their
    own block, and a socket timeout shorter than the block (redis-py 8's default is 5 s)
    only makes an idle read fail."""

    url: str
    prefix: str
    cluster: bool
    blocking_url: str
    sentinel: SentinelSettings | None = None
    wait_replicas: int = 0  # `WAIT n` after each batch of script calls (0: none)
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS


def parse_redis_settings(url: str) -> RedisSettings:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidURLError(
            url,
            "a Redis backend URL starts with redis://, rediss://, redis+cluster:// or "
            "redis+sentinel://",
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [value for key, value in query if key == "prefix"]
    prefix = prefixes[-1] if prefixes else DEFAULT_PREFIX
    if not prefix or ":" in prefix:
        raise InvalidURLError(url, f"prefix must be non-empty without ':', got {prefix!r}")
    cluster = scheme.endswith("+cluster")
    if cluster and parts.path.strip("/") not in ("", "0"):
        raise InvalidURLError(url, f"Redis Cluster has database 0 only, got {parts.path!r}")
    own = ("prefix", *_SENTINEL_PARAMS, *_WAIT_PARAMS)
    rest = [(key, value) for key, value in query if key not in own]
    sentinel = _sentinel(url, scheme, parts.netloc, parts.path, dict(query))
    if sentinel is not None:  # redis-py's URL: the first Sentinel's (not used to connect)
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2].split(",")[0], path="")
    plain = parts._replace(scheme=SCHEMES[scheme], query=urlencode(rest))
    unbounded = urlencode([(key, value) for key, value in rest if key != "socket_timeout"])
    blocking = urlunsplit(plain._replace(query=unbounded))
    replicas, timeout = _wait(url, dict(query))
    if replicas and cluster:  # WAIT has no key: a cluster pipeline would send it anywhere
        raise InvalidURLError(url, "wait_replicas is not supported on Redis Cluster")
    return RedisSettings(urlunsplit(plain), prefix, cluster, blocking, sentinel, replicas, timeout)


def _wait(url: str, query: dict[str, str]) -> tuple[int, int]:
    """`wait_replicas` (how many replicas each write must reach: 0 = none) and
    `wait_timeout` (ms; WAIT's own timeout) from the URL."""
    values = []
    for name, default in (("wait_replicas", 0), ("wait_timeout", DEFAULT_WAIT_TIMEOUT_MS)):
        text = query.get(name, str(default))
        if not text.isdigit():
            raise InvalidURLError(url, f"{name} must be a whole number >= 0, got {text!r}")
        values.append(int(text))
    if values[0] and not values[1]:
        raise InvalidURLError(url, "wait_timeout must be > 0 (0 would wait for ever)")
    return values[0], values[1]


def _sentinel(
    url: str,
    scheme: str,
    netloc: str,
    path: str,
    query: dict[str, str],
) -> SentinelSettings | None:
    """The Sentinel part of a `redis+sentinel://` URL (None for other schemes)."""
    if not scheme.endswith("+sentinel"):
        return None
    userinfo, _, hosts = netloc.rpartition("@")
    service, _, db = path.strip("/").partition("/")
    if not service or not hosts:
        raise InvalidURLError(url, "expected redis+sentinel://host:port,.../<service>/<db>")
    if db and not db.isdigit():
        raise InvalidURLError(url, f"the database must be a number, got {db!r}")
    node: dict[str, Any] = {"db": int(db or 0), "ssl": scheme.startswith("rediss")}
    user, _, password = userinfo.partition(":")
    node.update({"username": unquote(user) or None, "password": unquote(password) or None})
    watch = {"username": query.get("sentinel_username"), "password": query.get("sentinel_password")}
    watch["ssl"] = node["ssl"]
    return SentinelSettings([_address(url, h) for h in hosts.split(",")], service, node, watch)


def _address(url: str, host: str) -> tuple[str, int]:
    name, _, port = host.rpartition(":") if ":" in host else (host, "", "26379")
    if not port.isdigit():
        raise InvalidURLError(url, f"a Sentinel is host:port, got {host!r}")
    return name, int(port)


def parse_redis_url(url: str) -> tuple[str, str]:
    """(URL for redis-py, key prefix): psyq's own `prefix` parameter is taken out."""
    settings = parse_redis_settings(url)
    return settings.url, settings.prefix
