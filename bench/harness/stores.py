"""The throw-away places a benchmark measures in on a shared server, and their cleaning: a
fresh Redis key prefix or Postgres schema per run (the migration studies), the keys a run
left on a Redis server, and Redis' own memory figure."""

from __future__ import annotations

import uuid
from pathlib import Path

from bench.harness.pgdb import drop_schema, is_postgres
from bench.peers.peerlib import delete_matching, used_memory

KINDS = ("sqlite", "redis", "postgres")


def fresh_endpoint(kind: str, label: str, redis: str, postgres: str, folder: Path) -> str:
    """A store of `kind` no run used before: a file in `folder`, a fresh key prefix on the
    Redis server `redis`, or a fresh schema on the Postgres server `postgres`."""
    fresh = f"{label}{uuid.uuid4().hex[:8]}"
    if kind == "sqlite":
        return f"sqlite:///{folder}/{fresh}.db"
    if kind == "postgres":
        return f"{postgres}?schema={fresh}"
    if kind == "redis":
        return f"{redis}?prefix={fresh}"
    raise ValueError(f"unknown store kind {kind!r}; known: {', '.join(KINDS)}")


async def drop_endpoint(url: str) -> None:
    """Remove what `fresh_endpoint` made on a server: the prefix's keys, or the schema (a
    file goes with its folder)."""
    if url.startswith(("redis://", "rediss://")):
        await drop_prefix(url)
    elif is_postgres(url) and "?schema=" in url:
        await drop_schema(url)


async def drop_keys(url: str, pattern: str) -> int:
    """Delete the keys matching `pattern` on the Redis server of `url` (never FLUSHDB)."""
    from redis.asyncio import Redis

    client = Redis.from_url(url.split("?")[0])
    try:
        return await delete_matching(client, pattern)
    finally:
        await client.aclose()


async def drop_bench_queues(url: str) -> None:
    """Remove every queue the runner made on a shared Redis (their names start with bench-)."""
    await drop_keys(url, "bull:bench-*")


async def drop_prefix(url: str) -> None:
    """Delete every key under the key prefix of a `redis://...?prefix=P` URL."""
    from psyq.backends.redis.settings import parse_redis_url

    plain, prefix = parse_redis_url(url)
    await drop_keys(plain, f"{prefix}:*")


async def redis_used_memory(url: str) -> int:
    """The Redis server's INFO used_memory (jobs on redis:// live there)."""
    from redis.asyncio import Redis

    client = Redis.from_url(url.split("?")[0])
    try:
        return await used_memory(client)
    finally:
        await client.aclose()
