"""Fresh Postgres databases for the benchmarks: each system measured against a
`postgresql://` server gets a database of its own, created before its run and dropped
after it (issue 19: "each system in a fresh database"), so no system pays for the tables,
dead rows or sequences another one left behind."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

__all__ = [
    "drop_schema",
    "fresh_database",
    "is_postgres",
    "own_database",
    "peer_database",
    "peer_dsn",
    "private_server",
]


def is_postgres(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql://"))


def peer_dsn(url: str) -> dict[str, str]:
    """The peers' environment for a psyq URL: its server as a plain DSN."""
    from psyq.backends.postgres import parse_postgres_url

    return {"PSYQ_BENCH_PG_DSN": parse_postgres_url(url).dsn}


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@contextmanager
def fresh_database(url: str, label: str) -> Iterator[str]:
    """`url` pointing at a new database of the same server (named after `label`), dropped
    when the block ends; the URL's query (e.g. `?layout=bullmq`) is kept."""
    name = f"bench_{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    admin = urlunsplit(urlsplit(url)._replace(query=""))
    asyncio.run(_admin(admin, "CREATE DATABASE ", name))
    try:
        yield _with_database(url, name)
    finally:
        asyncio.run(_admin(admin, "DROP DATABASE IF EXISTS ", name, " WITH (FORCE)"))


async def _admin(url: str, verb: str, name: str, tail: str = "") -> None:
    conn = await asyncpg.connect(url)
    try:
        quoted = await conn.fetchval("SELECT quote_ident($1::text)", name)
        await conn.execute(verb + quoted + tail)
    finally:
        await conn.close()


@contextmanager
def own_database(url: str, label: str) -> Iterator[str]:
    """On a Postgres server, `url` in a fresh database; any other URL as it is."""
    if not is_postgres(url):
        yield url
        return
    with fresh_database(url, label) as fresh:
        yield fresh


@contextmanager
def peer_database(env: dict[str, str], peer: str) -> Iterator[dict[str, str]]:
    """A peer's environment with PSYQ_BENCH_PG_DSN (when set) in a fresh database."""
    dsn = env.get("PSYQ_BENCH_PG_DSN")
    if dsn is None:
        yield env
        return
    with fresh_database(dsn, peer) as fresh:
        yield {**env, "PSYQ_BENCH_PG_DSN": fresh}


@contextmanager
def private_server() -> Iterator[str]:
    """A throw-away PostgreSQL cluster of this run (initdb's defaults, so autovacuum runs as it
    does for users; the shared service of this machine runs without it), stopped and removed
    when the block ends. The cluster is the tests' own (tests/postgres/server.py: the
    repository's root is on the path, as `python -m` from there puts it)."""
    from tests.postgres.server import PrivateCluster, postgres_binaries

    cluster = PrivateCluster(postgres_binaries()[0])
    cluster.start()
    try:
        yield cluster.url
    finally:
        cluster.destroy()


async def drop_schema(url: str) -> None:
    """Drop the schema a `postgresql://...?schema=NAME` URL names, and everything in it."""
    server, _, schema = url.partition("?schema=")
    conn = await asyncpg.connect(server)
    try:
        quoted = await conn.fetchval("SELECT quote_ident($1::text)", schema)
        await conn.execute(f"DROP SCHEMA IF EXISTS {quoted} CASCADE")
    finally:
        await conn.close()
