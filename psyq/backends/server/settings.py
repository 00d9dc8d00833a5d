"""What a psyq:// URL says (see server/client.py for the parameters)."""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from psyq.backends.server.protocol import DEFAULT_PORT
from psyq.errors import InvalidURLError

__all__ = ["SETTINGS", "PsyqSettings", "parse_psyq_url"]

SETTINGS = ("token", "ca", "pool", "connect_timeout")


class PsyqSettings:
    """What a psyq:// URL says."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("psyq", "psyqs"):
            raise InvalidURLError(url, "a psyq server URL starts with psyq:// or psyqs://")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = sorted(set(query) - set(SETTINGS))
        if unknown:
            raise InvalidURLError(url, f"unknown parameters {unknown}; known: {list(SETTINGS)}")
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise InvalidURLError(url, "the port is not a number from 0 to 65535") from None
        self.host = parts.hostname or "127.0.0.1"
        self.port = port
        self.tls = parts.scheme == "psyqs"
        self.token = _token(url, query.get("token"), parts.password)
        self.ca = query.get("ca")
        self.pool = _number(url, query, "pool", "2", int)
        self.connect_timeout = _number(url, query, "connect_timeout", "10", float)
        self.safe_url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        return ssl.create_default_context(cafile=self.ca)


def _token(url: str, in_query: str | None, in_userinfo: str | None) -> str | None:
    """The token of `psyq://:TOKEN@host` or `psyq://host?token=TOKEN` (the same, if both)."""
    if in_userinfo is not None:
        in_userinfo = unquote(in_userinfo)
        if in_query is not None and in_query != in_userinfo:
            raise InvalidURLError(url, "the token after ':' and ?token= differ; give it once")
    return in_query if in_query is not None else in_userinfo


def _number(url: str, query: dict[str, str], name: str, default: str, kind: type) -> Any:
    text = query.get(name, default)
    try:
        value = kind(text)
    except ValueError:
        raise InvalidURLError(url, f"{name} must be a number, got {text!r}") from None
    if value <= 0:
        raise InvalidURLError(url, f"{name} must be > 0, got {text!r}")
    return value


def parse_psyq_url(url: str) -> PsyqSettings:
    return PsyqSettings(url)
