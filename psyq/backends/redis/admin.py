"""Queue administration: pause, resume, drain, clean, obliterate, rate limits, global
concurrency, deduplication keys, the worker registry and cancellation marks."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from redis.exceptions import ResponseError

from psyq.backends.base import (
    Limiter,
)
from psyq.backends.redis.connection import (
    CONNECTION_ERRORS,
    PSYQ_WORKER_SUFFIX,
    RedisConnection,
    worker_client_name,
)
from psyq.backends.redis.jobs import (
    MANUAL_LIMIT,
)
from psyq.errors import PsyqError
from psyq.rules.version import VERSION as psyq_version

OBLITERATE_BATCH = 1000  # jobs deleted per obliterate script call


class Admin(RedisConnection):
    """Queue-level operations and settings."""

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

    async def remove_rate_limit_key(self, queue: str) -> bool:
        return int(await self.client.delete(self.queue_key(queue) + ":limiter")) > 0

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

    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        owner: str | None = await self.client.get(f"{self.queue_key(queue)}:de:{dedup_id}")
        return owner

    async def remove_deduplication_key(
        self, queue: str, dedup_id: str, job_id: str | None = None
    ) -> bool:
        return bool(await self._run("removeDeduplicationKey", queue, dedup_id, job_id or ""))

    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        """Listed in the queue's `workers` hash; a lost connection raises psyq's
        ConnectionError (the worker tries again until it lands)."""
        key = self.queue_key(queue)
        try:
            entry = {"name": worker_name, "started": await self.now_ms(), **info}
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hset(key + ":workers", worker_name, json.dumps(entry))
                pipe.hsetnx(key + ":meta", "version", f"psyq:{psyq_version}")
                await pipe.execute()
        except CONNECTION_ERRORS as exc:
            raise self._lost(f"registering worker {worker_name!r} of {queue!r}", exc) from exc

    async def unregister_worker(self, queue: str, worker_name: str) -> None:
        try:
            await self.client.hdel(self.queue_key(queue) + ":workers", worker_name)
        except CONNECTION_ERRORS as exc:
            raise self._lost(f"unregistering worker {worker_name!r} of {queue!r}", exc) from exc

    async def get_workers(self, queue: str) -> list[dict[str, Any]]:
        """psyq's workers (from the registry), then BullMQ's (Node's) found as BullMQ finds
        them: connections named `<prefix>:<base64(queue)>` or `...:w:<name>`."""
        entries = await self.client.hvals(self.queue_key(queue) + ":workers")
        return [json.loads(entry) for entry in entries] + await self._bullmq_workers(queue)

    async def _bullmq_workers(self, queue: str) -> list[dict[str, Any]]:
        if self.cluster:
            return []  # CLIENT LIST answers for one node of a cluster
        base = worker_client_name(self.prefix, queue)
        now = await self.now_ms()
        found = []
        try:
            clients = await self.client.client_list()
        except ResponseError:  # CLIENT LIST refused (an ACL, a managed Redis): psyq's only
            return []
        for client in clients:
            name = client.get("name") or ""
            ours = name == base + PSYQ_WORKER_SUFFIX
            if not ours and (name == base or name.startswith(base + ":w:")):
                age = int(client.get("age") or 0)
                found.append(
                    {"name": name, "addr": client.get("addr"), "started": now - age * 1000}
                )
        return found

    async def cancel_job(self, queue: str, job_id: str, reason: str) -> bool:
        return bool(await self._run("cancelJob", queue, job_id, reason))

    async def get_cancelled(self, queue: str, job_ids: Sequence[str]) -> dict[str, str]:
        if not job_ids:
            return {}
        key = self.queue_key(queue) + ":cancelled"
        try:
            reasons = await self.client.hmget(key, list(job_ids))
        except CONNECTION_ERRORS as exc:
            raise self._lost(f"reading {key!r}", exc) from exc
        return {job_id: r for job_id, r in zip(job_ids, reasons, strict=True) if r is not None}
