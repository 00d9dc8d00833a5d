"""`memory://`: the BackendAdapter over the native engine, in this process.

Each method is one atomic store call under its shard's lock. Workers blocked on an empty
queue wait on a future that the next add, promotion, resume or settle resolves (and on a timer
for the next delayed job), never by polling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from psyq.backends.base import (
    JOB_STATES,
    BackendAdapter,
    Completed,
    Failed,
    FetchRequest,
    JobRecord,
    Limiter,
    NewJob,
    Retry,
    StalledResult,
)
from psyq.backends.native.engine import Engine, named_engine, wake
from psyq.backends.native.store import QueueStore
from psyq.core.clock import Clock
from psyq.errors import InvalidURLError

__all__ = ["MemoryBackend", "open_memory_backend"]

T = TypeVar("T")
DEFAULT_PREFIX = "bull"


def parse_memory_url(url: str) -> tuple[str, str]:
    """(engine name, key prefix) of a memory:// URL."""
    parts = urlsplit(url)
    if parts.scheme != "memory":
        raise InvalidURLError(url, "a memory backend URL starts with memory://")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"prefix"})
    if unknown:
        raise InvalidURLError(url, f"unknown parameters {unknown}; memory:// takes only prefix")
    prefix = query.get("prefix", [DEFAULT_PREFIX])[-1]
    if not prefix or ":" in prefix:
        raise InvalidURLError(url, f"prefix must be non-empty without ':', got {prefix!r}")
    return parts.netloc + parts.path, prefix


class MemoryBackend(BackendAdapter):
    """The native engine in this process. `clock=` gives a private engine on that clock."""

    kind = "memory"

    def __init__(self, url: str = "memory://", *, clock: Clock | None = None) -> None:
        super().__init__(url)
        name, prefix = parse_memory_url(url)
        self.engine = named_engine(name) if clock is None else Engine(clock)
        self._clock = self.engine.clock
        self._prefix = prefix + ":"

    # ------------------------------------------------------------------ plumbing
    def _run(self, queue: str, action: Callable[[QueueStore], T], notify: bool = False) -> T:
        key = self._prefix + queue
        engine = self.engine
        shard = engine.shard(key)
        with shard.lock:
            store = engine.store(shard, key, queue)
            result = action(store)
            if notify and store.waiters:
                wake(store)
        return result

    def _now(self) -> int:
        return self._clock.now_ms()

    async def now_ms(self) -> int:
        return self._clock.now_ms()

    # ------------------------------------------------------------------ adding
    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        now = self._now()
        return self._run(queue, lambda s: s.add_jobs(jobs, now), notify=True)

    # ------------------------------------------------------------------ fetching
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        now = self._now()
        return self._run(queue, lambda s: s.take(request, now))

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        now = self._now()

        def register(store: QueueStore) -> int | None:
            ready = store.ready_in(now)
            if ready != 0:
                store.waiters.add(future)
            return ready

        ready = self._run(queue, register)
        if ready == 0:
            return
        delay = timeout_ms if ready is None else min(timeout_ms, ready)
        timer = loop.call_later(max(delay, 0) / 1000, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()
            self._run(queue, lambda s: s.waiters.discard(future))

    # ------------------------------------------------------------------ settling
    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        now = self._now()

        def finish(store: QueueStore) -> list[JobRecord]:
            store.finish(job_id, token, outcome, now)
            return store.take(fetch, now) if fetch is not None else []

        return self._run(queue, finish, notify=True)

    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        now = self._now()
        self._run(queue, lambda s: s.retry(job_id, token, outcome, now), notify=True)

    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        now = self._now()
        self._run(queue, lambda s: s.move_to_delayed(job_id, timestamp_ms, token, now), True)

    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        self._run(queue, lambda s: s.hand_back(job_id, token), notify=True)

    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        now = self._now()
        return self._run(queue, lambda s: s.extend_locks(locks.items(), duration_ms, now))

    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        now = self._now()
        return self._run(queue, lambda s: s.move_stalled(max_stalled_count, now), notify=True)

    # ------------------------------------------------------------------ queries
    async def get_job(self, queue: str, job_id: str) -> JobRecord | None:
        return self._run(queue, lambda s: s.jobs.get(job_id))

    async def get_state(self, queue: str, job_id: str) -> str:
        record = await self.get_job(queue, job_id)
        return "unknown" if record is None or record.state is None else record.state

    async def get_jobs(
        self, queue: str, states: Sequence[str], start: int, end: int, asc: bool
    ) -> list[JobRecord]:
        return self._run(queue, lambda s: s.get_jobs(states, start, end, asc))

    async def get_job_counts(self, queue: str, states: Sequence[str]) -> dict[str, int]:
        return self._run(queue, lambda s: s.counts(states or JOB_STATES))

    async def get_job_logs(
        self, queue: str, job_id: str, start: int, end: int, asc: bool
    ) -> tuple[list[str], int]:
        return self._run(queue, lambda s: s.get_logs(job_id, start, end, asc))

    async def is_paused(self, queue: str) -> bool:
        return self._run(queue, lambda s: s.paused)

    async def list_queues(self) -> list[str]:
        size = len(self._prefix)
        return sorted(
            key[size:] for key in self.engine.queue_keys() if key.startswith(self._prefix)
        )

    # ------------------------------------------------------------------ job mutations
    async def update_progress(self, queue: str, job_id: str, progress: Any) -> None:
        def update(store: QueueStore) -> None:
            store.record(job_id).progress = progress

        self._run(queue, update)

    async def add_log(self, queue: str, job_id: str, row: str, keep_logs: int | None) -> int:
        return self._run(queue, lambda s: s.add_log(job_id, row, keep_logs))

    async def update_data(self, queue: str, job_id: str, data: str) -> None:
        def update(store: QueueStore) -> None:
            store.record(job_id).data = data

        self._run(queue, update)

    async def change_priority(
        self, queue: str, job_id: str, priority: int, lifo: bool = False
    ) -> None:
        self._run(queue, lambda s: s.change_priority(job_id, priority, lifo), notify=True)

    async def change_delay(self, queue: str, job_id: str, delay_ms: int) -> None:
        now = self._now()
        self._run(queue, lambda s: s.change_delay(job_id, delay_ms, now), notify=True)

    async def promote(self, queue: str, job_id: str) -> None:
        self._run(queue, lambda s: s.promote(job_id), notify=True)

    async def reprocess_job(self, queue: str, job_id: str, state: str) -> None:
        self._run(queue, lambda s: s.reprocess(job_id, state), notify=True)

    async def remove_job(self, queue: str, job_id: str, remove_children: bool = True) -> bool:
        return self._run(queue, lambda s: s.remove(job_id), notify=True)

    # ------------------------------------------------------------------ queue admin
    async def pause(self, queue: str) -> None:
        def pause(store: QueueStore) -> None:
            store.paused = True

        self._run(queue, pause)

    async def resume(self, queue: str) -> None:
        def resume(store: QueueStore) -> None:
            store.paused = False

        self._run(queue, resume, notify=True)

    async def drain(self, queue: str, delayed: bool) -> None:
        self._run(queue, lambda s: s.drain(delayed))

    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        now = self._now()
        return self._run(queue, lambda s: s.clean(grace_ms, limit, state, now))

    async def obliterate(self, queue: str, force: bool) -> None:
        self._run(queue, lambda s: s.check_obliterate(force))
        store = self.engine.drop(self._prefix + queue)
        if store is not None:
            wake(store)

    async def retry_jobs(self, queue: str, state: str, count: int, timestamp_ms: int) -> int:
        return self._run(queue, lambda s: s.retry_finished(state, count, timestamp_ms), True)

    async def promote_jobs(self, queue: str, count: int) -> int:
        return self._run(queue, lambda s: s.promote_all(count), notify=True)

    # ------------------------------------------------------------------ rate limits
    async def rate_limit(self, queue: str, delay_ms: int) -> None:
        now = self._now()

        def limit(store: QueueStore) -> None:
            store.limited_until = max(store.limited_until, now + delay_ms)

        self._run(queue, limit)

    async def get_rate_limit_ttl(self, queue: str, max_jobs: int | None) -> int:
        now = self._now()
        return self._run(queue, lambda s: max(0, s.limited_until - now))

    async def set_global_rate_limit(self, queue: str, limiter: Limiter | None) -> None:
        def limit(store: QueueStore) -> None:
            store.global_limiter = limiter

        self._run(queue, limit, notify=True)

    async def set_global_concurrency(self, queue: str, concurrency: int | None) -> None:
        def limit(store: QueueStore) -> None:
            store.global_concurrency = concurrency

        self._run(queue, limit, notify=True)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def open_memory_backend(url: str) -> MemoryBackend:
    """Entry point of the `memory` scheme."""
    return MemoryBackend(url)
