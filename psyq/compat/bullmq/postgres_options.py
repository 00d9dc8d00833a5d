"""`bullmq`'s Postgres options as a psyq `postgresql://` URL.

`bullmq` for Python (3.x) runs on Postgres given
`{"backend": "postgres", "connection": ..., "schema": ..., "skipVersionCheck": ...}`, where
`connection` is a libpq conninfo string (`host=db port=5432 dbname=app`), a `postgresql://`
URL, or a dict `{host, port, dbname | database, user, password}`, and `schema` (default
`bullmq`) holds the queues in BullMQ 6's layout: the same schema psyq's `postgresql://`
store uses, so the URL made here opens the very queues `bullmq` would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from psyq.backends.postgres.config import SCHEMES, parse_postgres_url
from psyq.errors import InvalidOptionsError

__all__ = ["DEFAULT_SCHEMA", "parse_conninfo", "postgres_url"]

DEFAULT_SCHEMA = "bullmq"
# libpq keywords a conninfo string or dict may carry that psyq's store (asyncpg) reads too;
# the rest of libpq's (options, connect_timeout, keepalives, ...) are refused by name
_NETLOC_KEYS = ("user", "password", "host", "port", "dbname")
_QUERY_KEYS = (
    "passfile",
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "target_session_attrs",
    "krbsrvname",
    "gsslib",
    "service",
    "application_name",
)
_DICT_KEYS = ("host", "port", "dbname", "database", "user", "password")
# one `keyword = value` pair of a conninfo string; a value is bare or single-quoted, with
# backslash escapes inside the quotes
_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)\s*")


def postgres_url(connection: Any, schema: Any = None) -> str:
    """The `postgresql://` URL of `bullmq`'s Postgres `connection` with its `schema`.
    Refuses, naming it, a value psyq's store cannot honour."""
    if schema is not None and not isinstance(schema, str):
        raise InvalidOptionsError(f"schema must be a string, got {schema!r}", option="schema")
    url = _with_schema(_base_url(connection), schema)
    parse_postgres_url(url)  # the store's own rules (a lower-case schema name, ...), now
    return url


def _base_url(connection: Any) -> str:
    if connection is None:  # libpq's defaults (PGHOST, PGDATABASE, ...), as in `bullmq`
        connection = {}
    if isinstance(connection, str) and urlsplit(connection).scheme in SCHEMES:
        return connection
    if isinstance(connection, str):
        return _url_of(parse_conninfo(connection))
    if isinstance(connection, Mapping):
        return _url_of(_dict_params(connection))
    raise InvalidOptionsError(
        f"connection {connection!r} is not a Postgres connection: with backend 'postgres' "
        "it is a libpq conninfo string, a postgresql:// URL or a dict "
        "{host, port, dbname, user, password}",
        option="connection",
    )


def parse_conninfo(conninfo: str) -> dict[str, str]:
    """The `keyword=value` pairs of a libpq conninfo string."""
    params: dict[str, str] = {}
    at = 0
    while at < len(conninfo) and conninfo[at:].strip():
        match = _PAIR.match(conninfo, at)
        if match is None or match.end() == at:
            raise InvalidOptionsError(
                "connection is not a libpq conninfo string ('keyword=value ...'): "
                f"cannot read it from {conninfo[at:].strip()[:30]!r}",
                option="connection",
            )
        params[match.group(1)] = _unquote(match.group(2))
        at = match.end()
    return params


def _unquote(value: str) -> str:
    if value.startswith("'"):
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def _dict_params(connection: Mapping[str, Any]) -> dict[str, str]:
    unknown = sorted(str(key) for key in connection if key not in _DICT_KEYS)
    if unknown:
        raise InvalidOptionsError(
            f"connection key {unknown[0]!r} is not one of bullmq's Postgres connection keys "
            f"{', '.join(_DICT_KEYS)}",
            option="connection",
        )
    params = {key: str(value) for key, value in connection.items() if value is not None}
    if "database" in params:
        params.setdefault("dbname", params.pop("database"))
    return params


def _url_of(params: Mapping[str, str]) -> str:
    """A postgresql:// URL with the same meaning as libpq's `params`."""
    unknown = sorted(set(params) - {*_NETLOC_KEYS, *_QUERY_KEYS})
    if unknown:
        raise InvalidOptionsError(
            f"connection keyword {unknown[0]!r} is not supported by psyq's Postgres store "
            f"(it reads {', '.join((*_NETLOC_KEYS, *_QUERY_KEYS))})",
            option="connection",
        )
    _check_port(params.get("port"))
    query = {key: params[key] for key in _QUERY_KEYS if key in params}
    host, port = params.get("host", ""), params.get("port")
    if host.startswith("/") or "," in host:  # a Unix-socket folder, or several hosts
        query.update({"host": host, **({"port": port} if port else {})})
        host = port = ""
    netloc = _auth(params) + quote(host, safe="") + (f":{port}" if port else "")
    path = "/" + quote(params["dbname"], safe="") if "dbname" in params else ""
    return f"postgresql://{netloc}{path}" + (f"?{urlencode(query)}" if query else "")


def _auth(params: Mapping[str, str]) -> str:
    user, password = params.get("user"), params.get("password")
    if user is None and password is None:
        return ""
    auth = quote(user or "", safe="")
    return f"{auth}:{quote(password, safe='')}@" if password is not None else f"{auth}@"


def _check_port(port: str | None) -> None:
    if port is not None and not port.isdigit():
        raise InvalidOptionsError(
            f"connection port must be a whole number, got {port!r}", option="connection"
        )


def _with_schema(url: str, schema: str | None) -> str:
    """`url` whose `schema` parameter is `schema`, else the URL's own, else `bullmq`'s
    default (a different one in the URL is refused: the two would name two places)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    if schema is None:
        schema = named[-1] if named else DEFAULT_SCHEMA
    if named and named[-1] != schema:
        raise InvalidOptionsError(
            f"schema {schema!r} differs from the schema {named[-1]!r} of connection URL "
            "(name it once)",
            option="schema",
        )
    query = [(key, value) for key, value in query if key != "schema"] + [("schema", schema)]
    return f"{parts.scheme}://{parts.netloc}{parts.path}?{urlencode(query)}"
