"""`redis://` / `rediss://`: queues stored exactly as BullMQ 5/6 stores them.

Every state transition is one Lua script (see `lua/`), so it is atomic; queries read keys
directly. Workers blocked on an empty queue wait with BZPOPMIN on the queue's marker on a
dedicated connection (BullMQ's wake-up), never polling.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from psyq import __version__ as psyq_version
from psyq.backends.base import (
    JOB_STATES,
    BackendAdapter,
    Completed,
    ErrorCode,
    ExportPage,
    Failed,
    FetchRequest,
    FlowNode,
    JobRecord,
    Limiter,
    NewJob,
    Retry,
    Settlement,
    StalledResult,
    raise_for_code,
)
from psyq.backends.redis import transfer
from psyq.backends.redis.jobs import (
    MANUAL_LIMIT,
    PRIORITY_SPAN,
    SKIP_LOCK_TOKEN,
    add_meta,
    decode_opts,
    encode_opts,
    glob_escape,
    record_from_fields,
    record_from_hash,
)
from psyq.backends.redis.scripts import Script, ScriptPipeline, load_scripts
from psyq.core import codec
from psyq.core.backoff import Reconnect
from psyq.core.schedule import first_run, next_run
from psyq.errors import ConnectionError, InvalidOptionsError, InvalidURLError, PsyqError

__all__ = ["RedisBackend", "open_redis_backend", "parse_redis_url"]

log = logging.getLogger("psyq.redis")
T = TypeVar("T")

DEFAULT_PREFIX = "bull"
MIN_VERSION = (5, 0, 0)
ADD_CHUNK = 1000
OBLITERATE_BATCH = 1000  # jobs deleted per obliterate script call
POOL_SIZE = 32  # connections for commands; a URL's max_connections=N overrides it
MAX_METRICS_POINTS = (
    7 * 24 * 60
)  # one week of minutes, as BullMQ keeps  # jobs per addJobs call when a bulk add is pipelined
_SCRIPTS: dict[str, Script] = {}
# Structures that hold each state (lists count with LLEN, sorted sets with ZCARD).
_LISTS = {"waiting": "wait", "paused": "paused", "active": "active"}
_SETS = {"completed", "failed", "delayed", "prioritized", "waiting-children"}
_NUMERIC_EVENT_FIELDS = ("attemptsMade", "delay")
# What a lost connection raises (redis-py's BusyLoadingError, a server still loading its
# data after a restart, is one of its ConnectionErrors).
_CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


def parse_redis_url(url: str) -> tuple[str, str]:
    """(URL for redis-py, key prefix): psyq's own `prefix` parameter is taken out."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise InvalidURLError(url, "a Redis backend URL starts with redis:// or rediss://")
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [value for key, value in query if key == "prefix"]
    prefix = prefixes[-1] if prefixes else DEFAULT_PREFIX
    if not prefix or ":" in prefix:
        raise InvalidURLError(url, f"prefix must be non-empty without ':', got {prefix!r}")
    rest = urlencode([(key, value) for key, value in query if key != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


def _scripts() -> dict[str, Script]:
    if not _SCRIPTS:
        _SCRIPTS.update(load_scripts())
    return _SCRIPTS


class RedisBackend(BackendAdapter):
    """BullMQ's Redis layout. One client for commands and scripts, one for blocking reads."""

    kind = "redis"
    batch_settles = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._redis_url, self.prefix = parse_redis_url(url)
        # redis-py's asyncio stubs type replies as bytes | str (and commands as maybe-awaitable);
        # with decode_responses=True they are str: the clients are typed Any here.
        self._client: Any = None
        self._blocking: Any = None
        self._whole_second_timeouts = False
        self._waiting: dict[str, Any] = {}  # queue -> client whose connections BZPOPMIN
        self._scripts = _scripts()
        self._pipeline = ScriptPipeline()
        self._reconnect = Reconnect()  # paces calls while the server does not answer

    # ------------------------------------------------------------------ lifecycle
    def _new_client(self, blocking: bool = False, name: str | None = None) -> Any:
        """Commands share a bounded pool (callers wait for a free connection); blocking reads
        (BZPOPMIN, XREAD BLOCK) hold a connection each, from their own unbounded pool,
        named `name` (CLIENT SETNAME) when given.
        No automatic retries: redis-py would retry a command whose task is being cancelled."""
        options: dict[str, Any] = {"decode_responses": True, "retry": None}
        if blocking:
            pool = ConnectionPool.from_url(
                self._redis_url, max_connections=2**20, client_name=name, **options
            )
        else:
            pool = BlockingConnectionPool.from_url(
                self._redis_url, max_connections=POOL_SIZE, timeout=None, **options
            )
        return Redis.from_pool(pool)  # the client owns the pool: aclose() closes it

    async def open(self) -> None:
        client = self._new_client()
        try:
            info = await client.info("server")
        except RedisError as exc:
            await client.aclose()
            raise ConnectionError(self.url, str(exc)) from None
        self._check_server(info, await _maxmemory_policy(client))
        self._client = client
        self._blocking = self._new_client(blocking=True)

    def _check_server(self, info: Mapping[str, Any], policy: str | None) -> None:
        version = str(info.get("redis_version", "0"))
        numbers = tuple(int(part) for part in version.split(".")[:3] if part.isdigit())
        if numbers < MIN_VERSION:
            raise ConnectionError(self.url, f"Redis {version} is too old: psyq needs >= 5.0.0")
        self._whole_second_timeouts = numbers < (6, 0, 0)  # BZPOPMIN takes decimals from 6.0
        if policy not in (None, "noeviction"):
            log.warning(
                "Redis at %s has maxmemory-policy %r: set it to 'noeviction', or Redis may "
                "evict job keys under memory pressure",
                self.url,
                policy,
            )

    async def close(self) -> None:
        await self._pipeline.wait_idle()
        for client in (self._client, self._blocking, *self._waiting.values()):
            if client is not None:
                await client.aclose()
        self._client = self._blocking = None
        self._waiting.clear()

    @property
    def client(self) -> Any:
        if self._client is None:
            raise PsyqError(f"the Redis backend {self.url!r} is not open")
        return self._client

    async def now_ms(self) -> int:
        seconds, micros = await self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # ------------------------------------------------------------------ plumbing
    def queue_key(self, queue: str) -> str:
        return f"{self.prefix}:{queue}"

    async def _run(self, name: str, queue: str, *args: Any) -> Any:
        """Run a script. While the server does not answer, calls are paced by one shared
        capped, jittered backoff, and each failure raises psyq's ConnectionError (redis-py
        reconnects the broken connections on their next use)."""
        await self._reconnect.wait()
        try:
            script = self._scripts[name]
            result = await self._pipeline.call(self.client, script, self.queue_key(queue), args)
        except RedisError as exc:
            raise self._script_error(name, queue, exc) from exc
        self._reconnect.succeeded()
        return result

    def _script_error(self, name: str, queue: str, exc: BaseException) -> PsyqError:
        if isinstance(exc, _CONNECTION_ERRORS):
            return self._lost(f"script {name} on queue {queue!r}", exc)
        return PsyqError(f"Redis script {name} failed on queue {queue!r}: {exc}")

    def _lost(self, what: str, exc: BaseException) -> ConnectionError:
        self._reconnect.failed()
        return ConnectionError(self.url, f"{what}: {exc or type(exc).__name__}")

    async def _run_code(
        self, name: str, queue: str, job_id: str, operation: str, *args: Any
    ) -> int:
        code = int(await self._run(name, queue, job_id, *args))
        raise_for_code(code, queue, job_id, operation)
        return code

    # ------------------------------------------------------------------ adding
    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        chunks = [jobs[i : i + ADD_CHUNK] for i in range(0, len(jobs), ADD_CHUNK)]
        if len(chunks) == 1 or any("parent" in new.opts for new in jobs):
            results = [await self._run("addJobs", queue, *self._add_args(jobs))]
        else:
            results = await self._add_pipelined(queue, chunks)
        records: list[JobRecord] = []
        offset = 0
        for result in results:
            records += await self._added(queue, jobs, offset, result)
            offset += (len(result) - 1) // 2
        return records

    def _add_args(self, jobs: Sequence[NewJob]) -> list[str]:
        args: list[str] = []
        for new in jobs:
            args += (add_meta(new), new.data, encode_opts(new.opts))
        return args

    async def _add_pipelined(self, queue: str, chunks: list[Sequence[NewJob]]) -> list[Any]:
        """Big bulks: one addJobs call per chunk, all in one MULTI/EXEC round trip."""
        script = self._scripts["addJobs"]
        queue_key = self.queue_key(queue)
        keys = script.keys(queue_key)
        try:
            await self.client.script_load(script.source)
            async with self.client.pipeline(transaction=True) as pipe:
                for chunk in chunks:
                    args = self._add_args(chunk)
                    pipe.evalsha(script.sha, len(keys), *keys, f"{queue_key}:", *args)
                return list(await pipe.execute())
        except RedisError as exc:
            raise PsyqError(f"Redis bulk add failed on queue {queue!r}: {exc}") from exc

    async def _added(
        self, queue: str, jobs: Sequence[NewJob], offset: int, result: list[Any]
    ) -> list[JobRecord]:
        if int(result[0]) == ErrorCode.PARENT_MISSING:
            parent = jobs[offset + int(result[1]) - 1].opts["parent"]
            raise_for_code(ErrorCode.JOB_MISSING, parent["queue"], parent["id"], "add a child to")
        now = int(result[0])
        records = []
        for i, new in enumerate(jobs[offset : offset + (len(result) - 1) // 2]):
            job_id, status = str(result[1 + 2 * i]), int(result[2 + 2 * i])
            if status == 1:
                records.append(self._new_record(queue, job_id, new, now))
            else:
                existing = await self.get_job(queue, job_id)
                if existing is None:
                    raise PsyqError(f"job {job_id!r} of {queue!r} vanished while adding")
                records.append(existing)
        return records

    @staticmethod
    def _new_record(queue: str, job_id: str, new: NewJob, now: int) -> JobRecord:
        opts = new.opts
        parent = opts.get("parent")
        record = JobRecord(
            job_id,
            queue,
            new.name,
            new.data,
            opts,
            now if new.timestamp is None else new.timestamp,
            opts.get("delay", 0),
            opts.get("priority", 0),
            parent_key=None if parent is None else f"{parent['queue']}:{parent['id']}",
        )
        if record.delay > 0:
            record.state = "delayed"
        else:
            record.state = "prioritized" if record.priority > 0 else "waiting"
        return record

    # ------------------------------------------------------------------ fetching
    @staticmethod
    def _fetch_arg(request: FetchRequest) -> dict[str, Any]:
        arg: dict[str, Any] = {
            "tokens": list(request.tokens),
            "lockDuration": request.lock_duration,
            "worker": request.worker_name or "",
        }
        if request.limiter is not None:
            arg["max"] = request.limiter.max
            arg["duration"] = request.limiter.duration
        return arg

    def _records(
        self, queue: str, hashes: Sequence[Sequence[str]], tokens: Sequence[str]
    ) -> list[JobRecord]:
        records = []
        for flat, token in zip(hashes, tokens, strict=False):
            record = record_from_fields(queue, flat)
            record.lock_token = token
            record.state = "active"
            records.append(record)
        return records

    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        if not request.tokens:
            return []
        arg = json.dumps(self._fetch_arg(request))
        hashes = await self._run("moveToActive", queue, arg)
        records = self._records(queue, hashes, request.tokens)
        await self._schedule_next(queue, records)
        return records

    def _block_timeout(self, block_ms: int) -> float:
        """BZPOPMIN's timeout in seconds (never 0, which would block forever)."""
        if self._whole_second_timeouts:
            return float(max(1, -(-block_ms // 1000)))
        return max(block_ms, 1) / 1000

    def _waiting_client(self, queue: str) -> Any:
        """The connections workers of `queue` block on, named as BullMQ names a worker's
        (`<prefix>:<base64(queue)>`), so BullMQ's getWorkers (CLIENT LIST) sees them."""
        if self._client is None:
            raise PsyqError(f"the Redis backend {self.url!r} is not open")
        client = self._waiting.get(queue)
        if client is None:
            name = f"{self.prefix}:{base64.b64encode(queue.encode()).decode()}"
            client = self._waiting[queue] = self._new_client(blocking=True, name=name)
        return client

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        """Block on the queue's marker until work may be ready. A popped delay marker (member
        "1", scored with a future due time) only shortens the next block: other markers
        (an add, a promotion) may come first."""
        blocking = self._waiting_client(queue)
        marker = self.queue_key(queue) + ":marker"
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            hint = int(await self._run("getWaitHint", queue))
            left_ms = int((deadline - time.monotonic()) * 1000)
            if hint == 0 or left_ms <= 0:
                return
            block_ms = left_ms if hint < 0 else min(left_ms, hint)
            try:
                popped = await _uncancelled(
                    blocking.bzpopmin(marker, self._block_timeout(block_ms))
                )
            except _CONNECTION_ERRORS as exc:
                raise self._lost(f"waiting on {marker!r}", exc) from exc
            if popped is None or popped[1] != "1":
                return

    # ------------------------------------------------------------------ settling
    @staticmethod
    def _settle_item(
        job_id: str, token: str, outcome: Completed | Failed | Retry
    ) -> dict[str, Any]:
        if isinstance(outcome, Completed):
            return {"id": job_id, "token": token, "kind": "completed", "value": outcome.returnvalue}
        item: dict[str, Any] = {
            "id": job_id,
            "token": token,
            "kind": "retry" if isinstance(outcome, Retry) else "failed",
            "value": outcome.reason,
            "stack": json.dumps(list(outcome.stacktrace)),
        }
        if isinstance(outcome, Retry):
            item["delay"] = outcome.delay
        return item

    async def _settle(
        self, queue: str, items: list[dict[str, Any]], fetch: FetchRequest | None
    ) -> tuple[list[Any], list[JobRecord]]:
        """(each job's code, as the script returned it: see _settle_code), fetched jobs."""
        arg: dict[str, Any] = {"settle": items}
        if fetch is not None and fetch.tokens:
            arg["fetch"] = self._fetch_arg(fetch)
        codes, hashes = await self._run("moveToFinished", queue, json.dumps(arg))
        fetched = self._records(queue, hashes, fetch.tokens) if fetch is not None else []
        await self._schedule_next(queue, fetched)
        return list(codes), fetched

    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        """One moveToFinished call (workers batch their settles through settle_many:
        psyq.core.settle)."""
        [code], fetched = await self._settle(
            queue, [self._settle_item(job_id, token, outcome)], fetch
        )
        operation = "complete" if isinstance(outcome, Completed) else "fail"
        raise_for_code(_settle_code(code, queue), queue, job_id, operation, "not active")
        return fetched

    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        [code], _ = await self._settle(queue, [self._settle_item(job_id, token, outcome)], None)
        raise_for_code(_settle_code(code, queue), queue, job_id, "retry", "not active")

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        items = [self._settle_item(s.job_id, s.token, s.outcome) for s in settlements]
        codes, fetched = await self._settle(queue, items, fetch)
        errors: list[PsyqError | None] = []
        for settlement, code in zip(settlements, codes, strict=True):
            try:
                code = _settle_code(code, queue)
                raise_for_code(code, queue, settlement.job_id, "settle", "not active")
                errors.append(None)
            except PsyqError as exc:
                errors.append(exc)
        return errors, fetched

    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        held = SKIP_LOCK_TOKEN if token is None else token
        await self._run_code("moveToDelayed", queue, job_id, "delay", timestamp_ms, held)

    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        await self._run_code("moveJobFromActiveToWait", queue, job_id, "hand back", token)

    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        pairs = [part for job_id, token in locks.items() for part in (job_id, token)]
        lost = await self._run("extendLocks", queue, duration_ms, *pairs)
        return [str(job_id) for job_id in lost]

    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        moved, failed = await self._run("moveStalledJobsToWait", queue, max_stalled_count)
        return StalledResult([str(i) for i in moved], [str(i) for i in failed])

    # ------------------------------------------------------------------ queries
    async def get_job(self, queue: str, job_id: str) -> JobRecord | None:
        flat = await self._run("getJob", queue, job_id)
        if not flat:
            return None
        return record_from_fields(queue, [*flat, "__id", job_id])

    async def get_state(self, queue: str, job_id: str) -> str:
        record = await self.get_job(queue, job_id)
        return "unknown" if record is None or record.state is None else record.state

    async def _ids(self, queue: str, state: str, asc: bool) -> list[str]:
        key = self.queue_key(queue)
        if state in _LISTS:
            ids: list[str] = await self.client.lrange(f"{key}:{_LISTS[state]}", 0, -1)
            return ids[::-1] if asc else ids  # the next to be taken is at the right end
        if state == "waiting-children" or state in _SETS:
            found: list[str] = await self.client.zrange(f"{key}:{state}", 0, -1)
            return found if asc else found[::-1]
        return []

    async def get_jobs(
        self, queue: str, states: Sequence[str], start: int, end: int, asc: bool
    ) -> list[JobRecord]:
        ids: list[tuple[str, str]] = []
        for state in states:
            ids += [(job_id, state) for job_id in await self._ids(queue, state, asc)]
        stop = None if end == -1 else end + 1
        chosen = ids[start:stop]
        key = self.queue_key(queue)
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id, _ in chosen:
                pipe.hgetall(f"{key}:{job_id}")
            hashes = await pipe.execute()
        records = []
        for (job_id, state), fields in zip(chosen, hashes, strict=True):
            if fields:
                record = record_from_hash(queue, job_id, fields)
                record.state = "waiting" if state == "paused" else state
                records.append(record)
        return records

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]:
        key = self.queue_key(queue)
        wanted = list(states or JOB_STATES)
        async with self.client.pipeline(transaction=False) as pipe:
            for state in wanted:
                if state in _LISTS:
                    pipe.llen(f"{key}:{_LISTS[state]}")
                else:
                    pipe.zcard(f"{key}:{state}")
            counts = await pipe.execute()
        return {state: int(count) for state, count in zip(wanted, counts, strict=True)}

    async def get_job_logs(
        self, queue: str, job_id: str, start: int, end: int, asc: bool
    ) -> tuple[list[str], int]:
        key = f"{self.queue_key(queue)}:{job_id}:logs"
        rows: list[str] = await self.client.lrange(key, 0, -1)
        ordered = rows if asc else rows[::-1]
        stop = None if end == -1 else end + 1
        return ordered[start:stop], len(rows)

    async def is_paused(self, queue: str) -> bool:
        return bool(await self.client.hexists(self.queue_key(queue) + ":meta", "paused"))

    async def list_queues(self) -> list[str]:
        """Queues with settings, an id counter or an event stream (every add writes an event,
        so a queue holding only custom-id jobs is found too)."""
        names = set()
        for suffix in (":meta", ":id", ":events"):
            pattern = f"{glob_escape(self.prefix)}:*{suffix}"
            async for key in self.client.scan_iter(match=pattern, count=10_000):
                names.add(key[len(self.prefix) + 1 : -len(suffix)])
        return sorted(name for name in names if ":" not in name)

    # ------------------------------------------------------------------ job mutations
    async def update_progress(self, queue: str, job_id: str, progress: Any) -> None:
        text = codec.dumps(progress, "progress", job_id)
        await self._run_code("updateProgress", queue, job_id, "update progress of", text)

    async def add_log(self, queue: str, job_id: str, row: str, keep_logs: int | None) -> int:
        keep = "" if keep_logs is None else keep_logs
        return await self._run_code("addLog", queue, job_id, "log to", row, keep)

    async def clear_logs(self, queue: str, job_id: str, keep: int) -> None:
        key = f"{self.queue_key(queue)}:{job_id}:logs"
        if keep <= 0:
            await self.client.delete(key)
        else:
            await self.client.ltrim(key, -keep, -1)

    async def update_data(self, queue: str, job_id: str, data: str) -> None:
        await self._run_code("updateData", queue, job_id, "update data of", data)

    async def change_priority(
        self, queue: str, job_id: str, priority: int, lifo: bool = False
    ) -> None:
        await self._run_code(
            "changePriority", queue, job_id, "change priority of", priority, int(lifo)
        )

    async def change_delay(self, queue: str, job_id: str, delay_ms: int) -> None:
        code = int(await self._run("changeDelay", queue, job_id, delay_ms))
        raise_for_code(code, queue, job_id, "change the delay of", "not delayed")

    async def promote(self, queue: str, job_id: str) -> None:
        code = int(await self._run("promote", queue, job_id, 0))
        raise_for_code(code, queue, job_id, "promote", "not delayed")

    async def reprocess_job(self, queue: str, job_id: str, state: str) -> None:
        code = int(await self._run("reprocessJob", queue, state, job_id, 0, 0))
        raise_for_code(code, queue, job_id, "retry", f"not {state}")

    async def remove_job(self, queue: str, job_id: str, remove_children: bool = True) -> bool:
        return bool(await self._run("removeJob", queue, job_id, int(remove_children)))

    # ------------------------------------------------------------------ queue admin
    async def pause(self, queue: str) -> None:
        await self._run("pause", queue, "pause")

    async def resume(self, queue: str) -> None:
        await self._run("pause", queue, "resume")

    async def drain(self, queue: str, delayed: bool) -> None:
        await self._run("drain", queue, int(delayed))

    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        cutoff = await self.now_ms() - grace_ms
        return [str(i) for i in await self._run("clean", queue, state, cutoff, limit)]

    async def obliterate(self, queue: str, force: bool) -> None:
        while True:  # one batch of jobs per script call, so Redis is never held for long
            code, count = await self._run("obliterate", queue, int(force), OBLITERATE_BATCH)
            if int(code) < 0:
                raise PsyqError(
                    f"cannot obliterate queue {queue!r}: {count} jobs are active "
                    "(close their workers first, or pass force=True)"
                )
            if int(code) == 0:
                return

    async def retry_jobs(self, queue: str, state: str, count: int, timestamp_ms: int) -> int:
        return int(await self._run("reprocessJob", queue, state, "", timestamp_ms, count))

    async def promote_jobs(self, queue: str, count: int) -> int:
        return int(await self._run("promote", queue, "", count))

    # ------------------------------------------------------------------ flows
    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        nodes: list[tuple[FlowNode, int]] = []  # pre-order, with 1-based parent index

        def walk(node: FlowNode, parent: int) -> None:
            nodes.append((node, parent))
            index = len(nodes)
            for child in node.children:
                walk(child, index)

        for root in roots:
            walk(root, 0)
        args: list[Any] = []
        for node, parent in nodes:
            new = node.job
            meta = add_meta(new, hold=bool(node.children), parent_flags=parent > 0)
            args += (
                self.queue_key(node.queue) + ":",
                parent,
                meta,
                new.data,
                encode_opts(new.opts),
            )
        result = await self._run("addFlow", nodes[0][0].queue, *args)
        return await self._flow_records(nodes, result)

    async def _flow_records(
        self, nodes: list[tuple[FlowNode, int]], result: list[Any]
    ) -> list[JobRecord]:
        now = int(result[0])
        records: list[JobRecord] = []
        for i, (node, parent) in enumerate(nodes):
            job_id, status = str(result[1 + 2 * i]), int(result[2 + 2 * i])
            if status == 1:
                record = self._new_record(node.queue, job_id, node.job, now)
                if node.children:
                    record.state = "waiting-children"
            else:
                found = await self.get_job(node.queue, job_id)
                if found is None:
                    raise PsyqError(f"job {job_id!r} of {node.queue!r} vanished while adding")
                record = found
            if parent > 0:
                parent_node = nodes[parent - 1][0]
                parent_id = records[parent - 1].id
                record.parent_key = f"{self.queue_key(parent_node.queue)}:{parent_id}"
            records.append(record)
        return records

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> dict[str, Any] | None:
        record = await self.get_job(queue, job_id)
        if record is None:
            return None
        children: list[dict[str, Any]] = []
        if depth != 1:
            keys = await self._children_keys(f"{self.queue_key(queue)}:{job_id}")
            for child_key in keys[: max_children or None]:
                child_queue, child_id = self._split_key(child_key)
                node = await self.get_flow(child_queue, child_id, max(0, depth - 1), max_children)
                if node is not None:
                    children.append(node)
        return {"job": record, "children": children}

    def _split_key(self, job_key: str) -> tuple[str, str]:
        """(queue name, id) of a job key "<prefix>:<queue>:<id>"."""
        _prefix, queue, job_id = job_key.split(":", 2)
        return queue, job_id

    async def _children_keys(self, job_key: str) -> list[str]:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.smembers(job_key + ":dependencies").hkeys(job_key + ":processed")
            pipe.zrange(job_key + ":unsuccessful", 0, -1).hkeys(job_key + ":failed")
            pending, processed, failed, ignored = await pipe.execute()
        return [*sorted(pending), *processed, *failed, *ignored]

    async def move_to_waiting_children(self, queue: str, job_id: str, token: str) -> bool:
        code = await self._run_code(
            "moveToWaitingChildren", queue, job_id, "move to waiting-children", token
        )
        return code == 1

    async def get_dependencies(self, queue: str, job_id: str) -> dict[str, Any]:
        job_key = f"{self.queue_key(queue)}:{job_id}"
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(job_key + ":processed").smembers(job_key + ":dependencies")
            pipe.hgetall(job_key + ":failed")
            processed, pending, ignored = await pipe.execute()
        return {
            "processed": dict(processed),
            "unprocessed": sorted(pending),
            "failed": await self.get_failed_children_values(queue, job_id),
            "ignored": dict(ignored),
        }

    async def get_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        values: dict[str, str] = await self.client.hgetall(
            f"{self.queue_key(queue)}:{job_id}:processed"
        )
        return values

    async def get_failed_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        keys = await self.client.zrange(f"{self.queue_key(queue)}:{job_id}:unsuccessful", 0, -1)
        if not keys:
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hget(key, "failedReason")
            reasons = await pipe.execute()
        return {key: reason or "" for key, reason in zip(keys, reasons, strict=True)}

    # ------------------------------------------------------------------ events
    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        key = self.queue_key(queue) + ":events"
        start = _stream_id(last_id)
        client = self._blocking if block_ms > 0 else self._client
        if client is None:
            raise PsyqError(f"the Redis backend {self.url!r} is not open")
        try:
            reply = await _uncancelled(
                client.xread({key: start}, count=count, block=block_ms or None)
            )
        except _CONNECTION_ERRORS as exc:
            raise self._lost(f"reading {key!r}", exc) from exc
        return [
            _event(entry_id, fields)
            for _stream, entries in reply or ()
            for entry_id, fields in entries
        ]

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        key = self.queue_key(queue)
        await self.client.hset(key + ":meta", "opts.maxLenEvents", max_len)
        await self.client.xtrim(key + ":events", maxlen=max_len, approximate=False)

    # ------------------------------------------------------------------ job schedulers
    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        millis = first_run(repeat, await self.now_ms())
        fields = {**repeat, "name": template.name, "data": template.data}
        fields["opts"] = encode_opts(template.opts)
        job_id = await self._add_run(queue, scheduler_id, "upsert", "", millis, fields, template)
        return await self.get_job(queue, job_id) if job_id else None

    async def _add_run(
        self,
        queue: str,
        scheduler_id: str,
        mode: str,
        prev: str,
        millis: int | None,
        fields: Mapping[str, Any],
        template: NewJob,
    ) -> str:
        opts = {**template.opts, "repeatJobKey": scheduler_id}
        new = NewJob(template.name, template.data, opts)
        args = (
            scheduler_id,
            mode,
            prev,
            "" if millis is None else millis,
            json.dumps(fields),
            add_meta(new),
            template.data,
            encode_opts(opts),
        )
        return str(await self._run("addJobScheduler", queue, *args))

    async def _schedule_next(self, queue: str, records: list[JobRecord]) -> None:
        """A scheduler's pending job became active: add its next run (BullMQ's workers do
        this too: the cron arithmetic lives outside Lua)."""
        for record in records:
            scheduler_id = record.opts.get("repeatJobKey")
            if scheduler_id is None:
                continue
            entry = await self.get_job_scheduler(queue, scheduler_id)
            prev = record.id.rsplit(":", 1)[-1]
            if entry is None or str(entry["next"]) != prev:
                continue
            millis = next_run(entry, int(prev), entry["iterationCount"], await self.now_ms())
            template = NewJob(entry["name"], entry["template"]["data"], entry["template"]["opts"])
            await self._add_run(queue, scheduler_id, "next", prev, millis, {}, template)

    async def get_job_scheduler(self, queue: str, scheduler_id: str) -> dict[str, Any] | None:
        fields = await self.client.hgetall(f"{self.queue_key(queue)}:repeat:{scheduler_id}")
        return _describe_scheduler(scheduler_id, fields) if fields else None

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[dict[str, Any]]:
        ids = await self.client.zrange(self.queue_key(queue) + ":repeat", 0, -1)
        ids = ids if asc else ids[::-1]
        stop = None if end == -1 else end + 1
        found = [await self.get_job_scheduler(queue, i) for i in ids[start:stop]]
        return [entry for entry in found if entry is not None]

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        return bool(await self._run("removeJobScheduler", queue, scheduler_id))

    # ------------------------------------------------------------------ rate limits
    async def rate_limit(self, queue: str, delay_ms: int) -> None:
        """BullMQ's manual limit: the limiter key holds MAX_SAFE_INTEGER for delay_ms."""
        if delay_ms > 0:
            await self.client.set(self.queue_key(queue) + ":limiter", MANUAL_LIMIT, px=delay_ms)

    async def get_rate_limit_ttl(self, queue: str, max_jobs: int | None) -> int:
        key = self.queue_key(queue) + ":limiter"
        async with self.client.pipeline(transaction=False) as pipe:
            used, ttl = await pipe.get(key).pttl(key).execute()
        if max_jobs is not None and int(used or 0) < max_jobs:
            return 0
        return max(0, int(ttl))

    async def set_global_rate_limit(self, queue: str, limiter: Limiter | None) -> None:
        meta = self.queue_key(queue) + ":meta"
        if limiter is None:
            await self.client.hdel(meta, "max", "duration")
        else:
            await self.client.hset(meta, mapping={"max": limiter.max, "duration": limiter.duration})

    async def set_global_concurrency(self, queue: str, concurrency: int | None) -> None:
        meta = self.queue_key(queue) + ":meta"
        if concurrency is None:
            await self.client.hdel(meta, "concurrency")
        else:
            await self.client.hset(meta, "concurrency", concurrency)
        await self.client.zadd(self.queue_key(queue) + ":marker", {"0": 0})

    # ------------------------------------------------------------------ deduplication
    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        owner: str | None = await self.client.get(f"{self.queue_key(queue)}:de:{dedup_id}")
        return owner

    async def remove_deduplication_key(
        self, queue: str, dedup_id: str, job_id: str | None = None
    ) -> bool:
        return bool(await self._run("removeDeduplicationKey", queue, dedup_id, job_id or ""))

    # ------------------------------------------------------------------ export / import
    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        return await transfer.export_jobs(self, queue, cursor, limit)

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        return await transfer.import_jobs(self, queue, page, overwrite)

    async def get_queue_meta(self, queue: str) -> dict[str, Any]:
        return await transfer.get_queue_meta(self, queue)

    async def set_queue_meta(self, queue: str, meta: Mapping[str, Any]) -> None:
        await transfer.set_queue_meta(self, queue, meta)

    # ------------------------------------------------------------------ metrics
    async def get_metrics(self, queue: str, kind: str, start: int, end: int) -> dict[str, Any]:
        """BullMQ's shape, newest minute first; the current minute is counted too."""
        key = f"{self.queue_key(queue)}:metrics:{kind}"
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(key, "count", "prevTS", "prevCount").lrange(key + ":data", 0, -1).time()
            (count, prev_ts, prev_count), stored, (seconds, micros) = await pipe.execute()
        total = int(count or 0)
        points: list[int] = []
        if prev_ts is not None:
            now = int(seconds) * 1000 + int(micros) // 1000
            quiet = max(0, now // 60_000 - int(prev_ts) // 60_000)
            current = total - int(prev_count or 0)
            points = [0] * min(quiet, MAX_METRICS_POINTS) + [current] + [int(p) for p in stored]
            points = points[:MAX_METRICS_POINTS]
        stop = None if end == -1 else end + 1
        return {"meta": {"count": total}, "data": points[start:stop], "count": len(points)}

    async def get_counts_per_priority(
        self, queue: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        key = self.queue_key(queue)
        async with self.client.pipeline(transaction=False) as pipe:
            for priority in priorities:
                if priority == 0:
                    pipe.llen(key + ":wait")
                else:
                    low = priority * PRIORITY_SPAN
                    pipe.zcount(key + ":prioritized", low, low + PRIORITY_SPAN - 1)
            counts = await pipe.execute()
        return {str(p): int(n) for p, n in zip(priorities, counts, strict=True)}

    # ------------------------------------------------------------------ workers
    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        entry = {"name": worker_name, "started": await self.now_ms(), **info}
        key = self.queue_key(queue)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(key + ":workers", worker_name, json.dumps(entry))
            pipe.hsetnx(key + ":meta", "version", f"psyq:{psyq_version}")
            await pipe.execute()

    async def unregister_worker(self, queue: str, worker_name: str) -> None:
        await self.client.hdel(self.queue_key(queue) + ":workers", worker_name)

    async def get_workers(self, queue: str) -> list[dict[str, Any]]:
        entries = await self.client.hvals(self.queue_key(queue) + ":workers")
        return [json.loads(entry) for entry in entries]

    # ------------------------------------------------------------------ cancellation
    async def cancel_job(self, queue: str, job_id: str, reason: str) -> bool:
        return bool(await self._run("cancelJob", queue, job_id, reason))

    async def get_cancelled(self, queue: str, job_ids: Sequence[str]) -> dict[str, str]:
        if not job_ids:
            return {}
        reasons = await self.client.hmget(self.queue_key(queue) + ":cancelled", list(job_ids))
        return {job_id: r for job_id, r in zip(job_ids, reasons, strict=True) if r is not None}


def _settle_code(code: Any, queue: str) -> int:
    """A moveToFinished code: an int, or the message of an error raised settling that job."""
    if isinstance(code, str) and code.startswith("ERR "):
        raise PsyqError(f"Redis script moveToFinished failed on queue {queue!r}: {code[4:]}")
    return int(code)


async def _maxmemory_policy(client: Any) -> str | None:
    """The server's maxmemory-policy, or None where CONFIG is not allowed (managed Redis)."""
    try:
        policy: dict[str, str] = await client.config_get("maxmemory-policy")
    except ResponseError:
        return None
    return policy.get("maxmemory-policy")


async def _uncancelled(call: Awaitable[T]) -> T:
    """Await a Redis command so that cancelling the caller never cancels the command.

    redis-py can lose a cancellation that arrives while a command is in flight (the call
    then returns normally, and a closing worker never stops). The command runs in its own
    task, shielded; a cancelled caller gets CancelledError at once and the command
    finishes by itself (a blocking one within its timeout), returning its connection."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_drop_result)
        raise


def _drop_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it


_STREAM_ID = re.compile(r"\d+(-\d+)?")


_SCHEDULER_INTS = ("every", "limit", "startDate", "endDate")


def _describe_scheduler(scheduler_id: str, fields: Mapping[str, str]) -> dict[str, Any]:
    """A scheduler hash as `get_job_scheduler` returns it (the native engine's shape)."""
    entry: dict[str, Any] = {"key": scheduler_id, "name": fields.get("name", "")}
    for name in ("pattern", "tz"):
        if name in fields:
            entry[name] = fields[name]
    for name in _SCHEDULER_INTS:
        if fields.get(name):
            entry[name] = int(float(fields[name]))
    if "immediately" in fields:
        entry["immediately"] = fields["immediately"] == "true"
    entry["template"] = {
        "data": fields.get("data", "null"),
        "opts": decode_opts(fields.get("opts")),
    }
    entry["iterationCount"] = int(fields.get("ic") or 0)
    entry["next"] = int(fields["next"]) if fields.get("next") else None
    return entry


def _stream_id(event_id: str) -> str:
    """XREAD's start id for QueueEvents' last_event_id ("$", "0" or a seen id)."""
    if event_id == "$":
        return "$"
    if not isinstance(event_id, str) or not _STREAM_ID.fullmatch(event_id):
        raise InvalidOptionsError(
            f"event id must be '$', '0' or an id like '1700000000000-5', got {event_id!r}",
            option="last_event_id",
        )
    return "0-0" if event_id == "0" else event_id


def _event(entry_id: str, fields: Mapping[str, str]) -> tuple[str, str, dict[str, Any]]:
    args: dict[str, Any] = dict(fields)
    event = str(args.pop("event", ""))
    for name in _NUMERIC_EVENT_FIELDS:
        if name in args:
            args[name] = int(float(args[name]))
    return entry_id, event, args


def open_redis_backend(url: str) -> RedisBackend:
    """Entry point of the `redis` and `rediss` schemes."""
    return RedisBackend(url)
