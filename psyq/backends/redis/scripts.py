"""The Lua scripts: read from `lua/<name>-<numKeys>.lua`, includes spliced in, loaded once
and run by EVALSHA (reloaded when the server answers NOSCRIPT, e.g. after a restart).

A script's header names the keys it touches (`-- KEYS: wait active ...`, suffixes of the
queue key); the loader passes exactly those as KEYS, so Redis Cluster and ACLs see them.
A script that declares none (its keys are built from ids) gets the queue key itself as
KEYS[1], unused by the script: Redis Cluster routes a call by its keys, and a call without
any would go to a random node.
Every script gets the queue key prefix `<prefix>:<queue>:` as ARGV[1], bound to `P`.
`--@include a b` splices `lua/includes/a.lua` and `b.lua` in that order.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

__all__ = [
    "Script",
    "ScriptPipeline",
    "key_command",
    "load_scripts",
    "pack_command",
    "pack_script_call",
    "pooled_connection",
]

PRELUDE = "local P = ARGV[1]\n"


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    key_suffixes: tuple[str, ...]
    source: str
    sha: str

    def keys(self, queue_key: str) -> list[str]:
        if not self.key_suffixes:
            return [queue_key]  # routes the call to the queue's slot (see the top)
        return [f"{queue_key}:{suffix}" for suffix in self.key_suffixes]


def _read(folder: Any, name: str) -> str:
    text: str = folder.joinpath(name).read_text(encoding="utf-8")
    return text


def _build(folder: Any, filename: str) -> Script:
    stem = filename.removesuffix(".lua")
    name, _, count = stem.rpartition("-")
    text = _read(folder, filename)
    suffixes: tuple[str, ...] = ()
    parts = [PRELUDE]
    for line in text.splitlines():
        if line.startswith("-- KEYS:"):
            listed = line.removeprefix("-- KEYS:").strip()
            suffixes = () if listed.startswith("(") else tuple(listed.split())
        elif line.startswith("--@include"):
            for include in line.split()[1:]:
                parts.append(_read(folder.joinpath("includes"), f"{include}.lua"))
    if len(suffixes) != int(count):
        raise RuntimeError(f"{filename}: header lists {len(suffixes)} keys, name says {count}")
    parts.append(text)
    source = "\n".join(parts)
    return Script(name, suffixes, source, hashlib.sha1(source.encode()).hexdigest())


def load_scripts() -> dict[str, Script]:
    """Every script of the package, by name (without the key count)."""
    folder = resources.files("psyq.backends.redis").joinpath("lua")
    scripts = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".lua"):
            script = _build(folder, entry.name)
            scripts[script.name] = script
    return scripts


Call = tuple[Script, list[str], tuple[Any, ...], "asyncio.Future[Any]"]
Send = Callable[[Any, list[Call]], Awaitable[list[Any]]]


class ScriptPipeline:
    """Runs script calls made in the same event-loop turn as one pipeline (one round trip,
    one connection), like ioredis' auto-pipelining: a worker at concurrency 100 settles its
    jobs in a few round trips instead of 100.

    The pipeline runs in its own task, so cancelling a caller never cancels a command in
    flight (redis-py can lose such a cancellation); the caller just stops waiting.

    On a Redis Cluster (`cluster=True`) every batch goes through redis-py's cluster
    pipeline, which sends each call to the node of its keys' slot and follows MOVED."""

    def __init__(self, cluster: bool = False, wait: tuple[int, int] | None = None) -> None:
        self._cluster = cluster
        self._wait = wait  # (replicas, timeout ms): WAIT after each batch, on its connection
        self._pending: list[Call] = []
        self._flushing: set[asyncio.Task[None]] = set()

    def call(self, client: Any, script: Script, queue_key: str, args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush_soon, client)
        self._pending.append((script, script.keys(queue_key), (f"{queue_key}:", *args), future))
        return future

    def _flush_soon(self, client: Any) -> None:
        batch, self._pending = self._pending, []
        one = len(batch) == 1 and not self._cluster and self._wait is None
        send = self._send_one if one else self._send  # one call: no pipeline
        task = asyncio.ensure_future(self._flush(client, batch, send))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _flush(self, client: Any, batch: list[Call], send: Send | None = None) -> None:
        try:
            results = await self._execute(client, batch, send or self._send)
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else RuntimeError("pipeline cancelled")
            results = [error] * len(batch)
        for (_, _, _, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def _execute(self, client: Any, batch: list[Call], send: Send) -> list[Any]:
        results = await send(client, batch)
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if missing:  # the server lost its scripts (restart, SCRIPT FLUSH): load and rerun
            for script in {batch[i][0] for i in missing}:
                await client.script_load(script.source)
            rerun = await send(client, [batch[i] for i in missing])
            for i, result in zip(missing, rerun, strict=True):
                results[i] = result
        return results

    async def _send(self, client: Any, batch: list[Call]) -> list[Any]:
        async with client.pipeline(transaction=False) as pipe:
            for script, keys, argv, _ in batch:
                # the command, not pipe.evalsha: a cluster pipeline blocks that method
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *argv)
            if self._wait is not None:  # the batch's writes reach that many replicas
                pipe.execute_command("WAIT", *self._wait)
            results = list(await pipe.execute(raise_on_error=False))
        return results if self._wait is None else _replicated(results, self._wait)

    @staticmethod
    async def _send_one(client: Any, batch: list[Call]) -> list[Any]:
        """One EVALSHA written straight to a pooled connection: packed by psyq (the keys
        and queue prefix of a script and queue are packed once), no redis-py pipeline."""
        [(script, keys, argv, _)] = batch
        pool = client.connection_pool
        conn = await pooled_connection(pool, "EVALSHA")
        try:
            await conn.send_packed_command(_pack(script, keys, argv), check_health=False)
            try:
                result = await conn.read_response()
            except ResponseError as exc:  # a script error, NOSCRIPT: the connection is fine
                result = exc
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)
        return [result]

    async def wait_idle(self) -> None:
        """Let pipelines in flight finish (before the connections close)."""
        while self._flushing or self._pending:
            await asyncio.gather(*self._flushing, return_exceptions=True)
            if self._pending:
                await asyncio.sleep(0)


class ReplicationError(RedisConnectionError):
    """Fewer replicas than `wait_replicas` confirmed a batch's writes within
    `wait_timeout`: each write is on the primary, its fate on a failover unknown, as for a
    lost reply (so it is mapped to psyq's ConnectionError, and retried where they are)."""

    def __init__(self, reached: int, replicas: int, timeout_ms: int) -> None:
        super().__init__(
            f"the write reached {reached} of {replicas} replica(s) within {timeout_ms} ms "
            "(it is on the primary; a failover before it replicates loses it)"
        )


def _replicated(results: list[Any], wait: tuple[int, int]) -> list[Any]:
    """The batch's results without WAIT's reply; when fewer replicas than asked confirmed
    the writes in time, each call's result is a ReplicationError instead (the write is on
    the primary: it may be lost on a failover)."""
    *results, reached = results
    if isinstance(reached, Exception) or int(reached) >= wait[0]:
        return results  # (a refused WAIT, e.g. on a replica, fails the calls itself)
    error = ReplicationError(int(reached), *wait)
    return [result if isinstance(result, Exception) else error for result in results]


_HEADS: dict[tuple[str, str], tuple[bytes, int]] = {}  # (sha, queue key) -> packed head


def _bulk(value: Any) -> bytes:
    data = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)


def pack_command(*parts: Any) -> bytes:
    """RESP for one command."""
    return b"*%d\r\n%b" % (len(parts), b"".join(_bulk(part) for part in parts))


def key_command(name: str, *tail: Any) -> Callable[[str], bytes]:
    """A packer of `name key *tail` for any key, its name and tail packed once (a page
    packs one per job: `pack_command` would cost ~9 us for an HMGET of 18 fields)."""
    head = b"*%d\r\n%b" % (len(tail) + 2, _bulk(name))
    packed_tail = b"".join(_bulk(part) for part in tail)

    def pack(key: str) -> bytes:
        data = key.encode()
        return b"%b$%d\r\n%b\r\n%b" % (head, len(data), data, packed_tail)

    return pack


def _head(script: Script, queue_key: str) -> tuple[bytes, int]:
    """`EVALSHA sha numkeys *keys <queue prefix>` packed (cached per script and queue), and
    how many parts it holds."""
    cached = _HEADS.get((script.sha, queue_key))
    if cached is None:
        if len(_HEADS) > 10_000:
            _HEADS.clear()
        keys = script.keys(queue_key)
        parts = ["EVALSHA", script.sha, len(keys), *keys, f"{queue_key}:"]
        cached = _HEADS[(script.sha, queue_key)] = (b"".join(map(_bulk, parts)), len(parts))
    return cached


def pack_script_call(script: Script, queue_key: str, args: tuple[Any, ...]) -> bytes:
    """RESP for `EVALSHA sha numkeys *keys <queue prefix> *args`."""
    head, count = _head(script, queue_key)
    return b"*%d\r\n%b%b" % (count + len(args), head, b"".join(map(_bulk, args)))


def _pack(script: Script, keys: list[str], argv: tuple[Any, ...]) -> bytes:
    """RESP for `EVALSHA sha numkeys *keys *argv`; argv[0] is the queue prefix."""
    return pack_script_call(script, argv[0][:-1], argv[1:])


async def pooled_connection(pool: Any, command: str) -> Any:
    """A connection of a redis-py pool, to send `command` on by hand (release it to the
    pool after)."""
    try:
        return await pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants a command name (deprecated since)
        return await pool.get_connection(command)
