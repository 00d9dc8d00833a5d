"""What a Redis backend URL says: redis-py's URL, the key prefix, cluster or not."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from psyq.errors import InvalidURLError

__all__ = ["DEFAULT_PREFIX", "RedisSettings", "parse_redis_settings", "parse_redis_url"]

DEFAULT_PREFIX = "bull"
SCHEMES = {
    "redis": "redis",
    "rediss": "rediss",
    "redis+cluster": "redis",
    "rediss+cluster": "rediss",
}


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


def parse_redis_settings(url: str) -> RedisSettings:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidURLError(
            url, "a Redis backend URL starts with redis://, rediss:// or redis+cluster://"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [value for key, value in query if key == "prefix"]
    prefix = prefixes[-1] if prefixes else DEFAULT_PREFIX
    if not prefix or ":" in prefix:
        raise InvalidURLError(url, f"prefix must be non-empty without ':', got {prefix!r}")
    cluster = scheme.endswith("+cluster")
    if cluster and parts.path.strip("/") not in ("", "0"):
        raise InvalidURLError(url, f"Redis Cluster has database 0 only, got {parts.path!r}")
    rest = [(key, value) for key, value in query if key != "prefix"]
    plain = parts._replace(scheme=SCHEMES[scheme], query=urlencode(rest))
    unbounded = urlencode([(key, value) for key, value in rest if key != "socket_timeout"])
    blocking = urlunsplit(plain._replace(query=unbounded))
    return RedisSettings(urlunsplit(plain), prefix, cluster, blocking)


def parse_redis_url(url: str) -> tuple[str, str]:
    """(URL for redis-py, key prefix): psyq's own `prefix` parameter is taken out."""
    settings = parse_redis_settings(url)
    return settings.url, settings.prefix
