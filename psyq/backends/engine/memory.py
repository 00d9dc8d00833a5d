"""`memory://`: the BackendAdapter over the engine, in this process.

Each method is one atomic store call under its shard's lock (or, when it reaches into other
queues, under every lock). Workers blocked on an empty queue wait on a future that the next
add, promotion, resume or settle resolves (and on a timer for the next delayed job), never
by polling; event readers wait the same way for the next event. A loop of calls gives the
event loop a turn every few ms (pacing.py).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from psyq.backends.base import (
    JOB_STATES,
    BackendAdapter,
    Completed,
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
)
from psyq.backends.contract import shapes
from psyq.backends.engine import flows, schedulers, transfer
from psyq.backends.engine.engine import Engine, Shard, named_engine, wake_futures
from psyq.backends.engine.eventlog import Position, parse_event_id
from psyq.backends.engine.group_calls import EngineGroups
from psyq.backends.engine.pacing import pace
from psyq.backends.engine.state import CrossQueue
from psyq.backends.engine.store import QueueStore
from psyq.errors import InvalidURLError, PsyqError
from psyq.rules import codec
from psyq.rules.clock import Clock
from psyq.rules.prefix import DEFAULT_PREFIX
from psyq.rules.slices import inclusive_slice

__all__ = ["MemoryBackend", "open_memory_backend"]

T = TypeVar("T")
MAX_OPEN_EXPORTS = 16  # export snapshots kept for cursors; the oldest goes first


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


_SETTLE_PARTS = ("move_to_finished", "retry_job", "move_to_active", "settle_many")


class MemoryBackend(EngineGroups, BackendAdapter):
    """The engine in this process. `clock=` gives a private engine on that clock."""

    kind = "memory"
    event_ids_count = True

    def __init__(self, url: str = "memory://", *, clock: Clock | None = None) -> None:
        super().__init__(url)
        name, prefix = parse_memory_url(url)
        self.engine = named_engine(name) if clock is None else Engine(clock)
        self._clock = self.engine.clock
        self._prefix = prefix + ":"
        self._exports: OrderedDict[str, list[str]] = OrderedDict()  # token -> ids
        self._places: dict[str, tuple[str, Shard, Engine]] = {}  # queue -> key, shard
        # settle_many in one engine call, unless a subclass changes a part of it (SQLite)
        self._one_call_settles = all(
            getattr(type(self), name) is getattr(MemoryBackend, name) for name in _SETTLE_PARTS
        )

    # ------------------------------------------------------------------ plumbing
    def _run(self, queue: str, action: Callable[[QueueStore], T], notify: bool = False) -> T:
        engine = self.engine
        place = self._places.get(queue)
        if place is None or place[2] is not engine:  # found once per queue (and engine:
            key = self._prefix + queue  # a SQLite backend attaches its database's)
            place = self._places[queue] = (key, engine.shard(key), engine)
        key, shard, _ = place
        try:
            with shard.lock:
                store = shard.stores.get(key)
                if store is None:
                    store = engine.store(shard, key, queue)
                result = action(store)
                if store.waiters or store.events.waiters:
                    _wake(store, notify)
                return result
        except CrossQueue:
            return self._run_everywhere(queue, action, notify)

    def _run_everywhere(
        self, queue: str, action: Callable[[QueueStore], T], notify: bool = False
    ) -> T:
        with self.engine.every_lock():
            store = self.engine.store_for_key(self._prefix + queue)
            result = action(store)
            _wake(store, notify)
            return result

    def _forget(
        self,
        queue: str,
        waiters: Callable[[QueueStore], set[asyncio.Future[None]]],
        future: asyncio.Future[None],
    ) -> None:
        """Take an ended wait's future out of its store, if the shard lock is free at once.
        A coroutine's `finally` may run inside the garbage collector, in any thread, even
        one that holds this lock (a flush holds them all): waiting there would deadlock. A
        future left behind is harmless: the next wake-up drops it."""
        key = self._prefix + queue
        shard = self.engine.shard(key)
        if not shard.lock.acquire(blocking=False):
            return
        try:
            store = shard.stores.get(key)
            if store is not None:
                waiters(store).discard(future)
        finally:
            shard.lock.release()

    def _now(self) -> int:
        return self._clock.now_ms()

    async def now_ms(self) -> int:
        return self._clock.now_ms()

    async def _block(self, future: asyncio.Future[None], ms: int) -> None:
        timer = asyncio.get_running_loop().call_later(max(ms, 0) / 1000, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()

    # ------------------------------------------------------------------ adding
    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        now = self._clock.now_ms()
        return self._run(queue, lambda s: s.add_jobs(jobs, now), notify=True)

    # ------------------------------------------------------------------ fetching
    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        now = self._clock.now_ms()
        return self._run(queue, lambda s: s.move_to_active(request, now))

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        now = self._now()

        def register(store: QueueStore) -> int | None:
            ready = store.ready_in(now)
            if ready != 0:
                store.waiters.add(future)
            return ready

        ready = self._run(queue, register)
        if ready == 0:
            return
        # one ms past the due time: the clock reads whole ms, and a loop's timer (uvloop's,
        # whole ms too) may fire up to one early, before the job is due
        wait = timeout_ms if ready is None else min(timeout_ms, ready + 1)
        try:
            await self._block(future, wait)
        finally:
            self._forget(queue, lambda s: s.waiters, future)

    # ------------------------------------------------------------------ settling
    async def move_to_finished(
        self,
        queue: str,
        job_id: str,
        token: str,
        outcome: Completed | Failed,
        fetch: FetchRequest | None = None,
    ) -> list[JobRecord]:
        now = self._clock.now_ms()

        def finish(store: QueueStore) -> list[JobRecord]:
            store.move_to_finished(job_id, token, outcome, now)
            return store.move_to_active(fetch, now) if fetch is not None else []

        return self._run(queue, finish, notify=True)

    async def settle_many(
        self, queue: str, settlements: Sequence[Settlement], fetch: FetchRequest | None = None
    ) -> tuple[list[PsyqError | None], list[JobRecord]]:
        if not self._one_call_settles:
            return await super().settle_many(queue, settlements, fetch)
        now = self._clock.now_ms()
        return self._run(queue, lambda s: s.settle_many(settlements, fetch, now), notify=True)

    async def retry_job(self, queue: str, job_id: str, token: str, outcome: Retry) -> None:
        now = self._now()
        self._run(queue, lambda s: s.retry_job(job_id, token, outcome, now), notify=True)

    async def move_to_delayed(
        self, queue: str, job_id: str, timestamp_ms: int, token: str | None = None
    ) -> None:
        now = self._now()
        self._run(queue, lambda s: s.move_to_delayed(job_id, timestamp_ms, token, now), True)

    async def move_job_from_active_to_wait(self, queue: str, job_id: str, token: str) -> None:
        self._run(queue, lambda s: s.move_job_from_active_to_wait(job_id, token), notify=True)

    async def extend_locks(
        self, queue: str, locks: Mapping[str, str], duration_ms: int
    ) -> list[str]:
        now = self._now()
        return self._run(queue, lambda s: s.extend_locks(locks.items(), duration_ms, now))

    async def move_stalled_jobs_to_wait(
        self, queue: str, max_stalled_count: int, stalled_interval_ms: int
    ) -> StalledResult:
        now = self._now()
        return self._run(
            queue, lambda s: s.move_stalled_jobs_to_wait(max_stalled_count, now), notify=True
        )

    # ------------------------------------------------------------------ queries
    async def get_job(self, queue: str, job_id: str) -> JobRecord | None:
        return self._run(queue, lambda s: next(iter(s.peek([job_id])), None))

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
        prefix = self._prefix
        keys = self.engine.queue_keys()
        return sorted(key[len(prefix) :] for key in keys if key.startswith(prefix))

    # ------------------------------------------------------------------ job mutations
    async def update_progress(self, queue: str, job_id: str, progress: Any) -> None:
        text = codec.dumps(progress, "progress", job_id)
        self._run(queue, lambda s: s.update_progress(job_id, progress, text))

    async def add_log(self, queue: str, job_id: str, row: str, keep_logs: int | None) -> int:
        return self._run(queue, lambda s: s.add_log(job_id, row, keep_logs))

    async def clear_logs(self, queue: str, job_id: str, keep: int) -> None:
        self._run(queue, lambda s: s.clear_logs(job_id, keep))

    async def update_data(self, queue: str, job_id: str, data: str) -> None:
        self._run(queue, lambda s: s.update_data(job_id, data))

    async def change_priority(
        self, queue: str, job_id: str, priority: int, lifo: bool = False
    ) -> None:
        self._run(queue, lambda s: s.change_priority(job_id, priority, lifo), notify=True)

    async def change_delay(self, queue: str, job_id: str, delay_ms: int) -> None:
        now = self._now()
        self._run(queue, lambda s: s.change_delay(job_id, delay_ms, now), notify=True)

    async def promote(self, queue: str, job_id: str) -> None:
        self._run(queue, lambda s: s.promote(job_id), notify=True)

    async def reprocess_job(
        self, queue: str, job_id: str, state: str, made: bool = False, started: bool = False
    ) -> None:
        self._run(queue, lambda s: s.reprocess_job(job_id, state, made, started), notify=True)

    async def remove_job(self, queue: str, job_id: str, remove_children: bool = True) -> bool:
        def remove(store: QueueStore) -> bool:
            if schedulers.owns_pending_run(store, job_id):
                return False
            return store.remove_job(job_id, remove_children)

        return self._run(queue, remove, notify=True)

    # ------------------------------------------------------------------ queue admin
    async def pause(self, queue: str) -> None:
        self._run(queue, lambda s: s.set_paused(True))

    async def resume(self, queue: str) -> None:
        self._run(queue, lambda s: s.set_paused(False), notify=True)

    async def drain(self, queue: str, delayed: bool) -> None:
        self._run(queue, lambda s: s.drain(delayed))

    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        now = self._now()
        return self._run(queue, lambda s: s.clean(grace_ms, limit, state, now))

    async def obliterate(self, queue: str, force: bool) -> None:
        self._run(queue, lambda s: s.check_obliterate(force))
        store = self.engine.drop(self._prefix + queue)
        if store is not None:
            wake_futures(store.waiters)
            wake_futures(store.events.waiters)

    async def retry_jobs(self, queue: str, state: str, count: int, timestamp_ms: int) -> int:
        return self._run(queue, lambda s: s.retry_jobs(state, count, timestamp_ms), True)

    async def promote_jobs(self, queue: str, count: int) -> int:
        return self._run(queue, lambda s: s.promote_jobs(count), notify=True)

    # ------------------------------------------------------------------ flows
    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        now = self._now()
        engine = self.engine

        stores: dict[str, QueueStore] = {}

        def store_of(queue: str) -> QueueStore:
            store = stores.get(queue)
            if store is None:
                store = stores[queue] = engine.store_for_key(self._prefix + queue)
                engine.touched.add(store)
            return store

        with engine.every_lock():
            flows.check_flow(engine, store_of, roots)
            trees = [flows.add_tree(store_of, root, now, None) for root in roots]
        return [record for tree in trees for record in _preorder(tree)]

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> shapes.FlowTree | None:
        with self.engine.every_lock():
            store = self.engine.existing_store(self._prefix + queue)
            return None if store is None else flows.get_tree(store, job_id, depth, max_children)

    async def move_to_waiting_children(self, queue: str, job_id: str, token: str) -> bool:
        return self._run(queue, lambda s: s.move_to_waiting_children(job_id, token))

    async def get_dependencies(self, queue: str, job_id: str) -> shapes.Dependencies:
        return self._run(queue, lambda s: flows.dependencies(s, job_id))

    async def get_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        return self._run(queue, lambda s: flows.dependencies(s, job_id)["processed"])

    async def get_failed_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        return self._run(queue, lambda s: flows.dependencies(s, job_id)["failed"])

    # ------------------------------------------------------------------ events
    async def read_events(
        self, queue: str, last_id: str, count: int, block_ms: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def read(store: QueueStore) -> tuple[Position, list[tuple[str, str, dict[str, Any]]]]:
            after = parse_event_id(last_id, store.events.newest)
            found = store.events.read(after, count)
            if not found and block_ms > 0:
                store.events.waiters.add(future)
            return after, found

        after, found = self._run(queue, read)
        if found or block_ms <= 0:
            return found
        try:
            await self._block(future, block_ms)
        finally:
            self._forget(queue, lambda s: s.events.waiters, future)
        return self._run(queue, lambda s: s.events.read(after, count))

    async def newest_event_id(self, queue: str) -> str:
        return self._run(queue, lambda s: s.events.newest_id())

    async def set_max_len_events(self, queue: str, max_len: int) -> None:
        def set_max_len(store: QueueStore) -> None:
            store.events.set_max_len(max_len)
            store.changed()

        self._run(queue, set_max_len)

    # ------------------------------------------------------------------ schedulers
    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        now = self._now()
        return self._run(
            queue, lambda s: schedulers.upsert(s, scheduler_id, repeat, template, now), True
        )

    async def get_job_scheduler(
        self, queue: str, scheduler_id: str
    ) -> shapes.SchedulerEntry | None:
        def get(store: QueueStore) -> shapes.SchedulerEntry | None:
            entry = store.schedulers.get(scheduler_id)
            return None if entry is None else schedulers.describe(entry)

        return self._run(queue, get)

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[shapes.SchedulerEntry]:
        def listing(store: QueueStore) -> list[shapes.SchedulerEntry]:
            entries = sorted(store.schedulers.values(), key=lambda e: e["next"] or 0)
            entries = entries if asc else entries[::-1]
            return [schedulers.describe(entry) for entry in inclusive_slice(entries, start, end)]

        return self._run(queue, listing)

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        return self._run(queue, lambda s: schedulers.remove(s, scheduler_id))

    # ------------------------------------------------------------------ rate limits
    async def rate_limit(self, queue: str, delay_ms: int) -> None:
        now = self._now()

        def limit(store: QueueStore) -> None:
            store.limited_until = max(store.limited_until, now + delay_ms)
            store.changed()

        self._run(queue, limit)

    async def get_rate_limit_ttl(self, queue: str, max_jobs: int | None) -> int:
        now = self._now()
        return self._run(queue, lambda s: max(0, s.limited_until - now))

    async def remove_rate_limit_key(self, queue: str) -> bool:
        now = self._now()
        return self._run(queue, lambda s: s.remove_rate_limit(now), notify=True)

    async def set_global_rate_limit(self, queue: str, limiter: Limiter | None) -> None:
        def limit(store: QueueStore) -> None:
            store.global_limiter = limiter
            store.changed()

        self._run(queue, limit, notify=True)

    async def set_global_concurrency(self, queue: str, concurrency: int | None) -> None:
        def limit(store: QueueStore) -> None:
            store.global_concurrency = concurrency
            store.changed()

        self._run(queue, limit, notify=True)

    # ------------------------------------------------------------------ deduplication
    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        now = self._now()

        def get(store: QueueStore) -> str | None:
            entry = store.dedup.get(dedup_id)
            if entry is None or (entry[1] is not None and entry[1] <= now):
                return None
            return entry[0]

        return self._run(queue, get)

    async def remove_deduplication_key(
        self, queue: str, dedup_id: str, job_id: str | None = None
    ) -> bool:
        def remove(store: QueueStore) -> bool:
            entry = store.dedup.get(dedup_id)
            if entry is None or (job_id is not None and entry[0] != job_id):
                return False
            del store.dedup[dedup_id]
            store.changed()
            return True

        return self._run(queue, remove)

    # ------------------------------------------------------------------ metrics and workers
    async def get_metrics(self, queue: str, kind: str, start: int, end: int) -> shapes.Metrics:
        now = self._now()
        return self._run(queue, lambda s: s.metrics[kind].query(start, end, now))

    async def get_counts_per_priority(
        self, queue: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        return self._run(queue, lambda s: s.counts_per_priority(priorities))

    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        now = self._now()

        def register(store: QueueStore) -> None:
            store.workers[worker_name] = {"name": worker_name, "started": now, **info}

        self._run(queue, register)

    async def unregister_worker(self, queue: str, worker_name: str) -> None:
        self._run(queue, lambda s: s.workers.pop(worker_name, None))

    async def get_workers(self, queue: str) -> list[dict[str, Any]]:
        return self._run(queue, lambda s: [dict(info) for info in s.workers.values()])

    # ------------------------------------------------------------------ cancellation
    async def cancel_job(self, queue: str, job_id: str, reason: str) -> bool:
        def cancel(store: QueueStore) -> bool:
            if job_id not in store.active:
                return False
            store.cancelled[job_id] = reason
            return True

        return self._run(queue, cancel)

    async def get_cancelled(self, queue: str, job_ids: Sequence[str]) -> dict[str, str]:
        def cancelled(store: QueueStore) -> dict[str, str]:
            marks = store.cancelled
            return {job_id: marks[job_id] for job_id in job_ids if job_id in marks}

        return self._run(queue, cancelled)

    # ------------------------------------------------------------------ export / import
    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        if limit < 1:
            raise PsyqError(f"export limit must be >= 1, got {limit!r}")
        token, start = self._export_cursor(queue, cursor)
        ids = self._exports[token]
        page = self._run(queue, lambda s: transfer.export_page(s, ids, start, limit))
        page.key_prefix = self.key_prefix
        if start + limit < len(ids):
            page.next_cursor = f"{token}:{start + limit}"
        else:
            del self._exports[token]
        return page

    def _export_cursor(self, queue: str, cursor: str | None) -> tuple[str, int]:
        """(snapshot token, offset): a new export snapshots the queue's ids in export order,
        so later pages are exact however the queue changes meanwhile."""
        if cursor is None:
            token = uuid.uuid4().hex
            self._exports[token] = self._run(queue, transfer.export_ids)
            while len(self._exports) > MAX_OPEN_EXPORTS:
                self._exports.popitem(last=False)
            return token, 0
        token, _, offset = cursor.partition(":")
        if token not in self._exports or not offset.isdigit():
            raise PsyqError(
                f"export cursor {cursor!r} is unknown or expired; start again with cursor=None"
            )
        return token, int(offset)

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        page = self.own_keys(page)
        return self._run(queue, lambda s: transfer.import_page(s, page, overwrite), notify=True)

    async def get_queue_meta(self, queue: str) -> shapes.QueueMeta:
        return copy.deepcopy(self._run(queue, transfer.queue_meta))

    async def set_queue_meta(self, queue: str, meta: shapes.QueueMeta) -> None:
        self._run(queue, lambda s: transfer.apply_meta(s, meta), notify=True)


def _wake(store: QueueStore, notify: bool) -> None:
    """After a store call: wake blocked workers (work may be ready), event readers (news)."""
    if notify and store.waiters:
        wake_futures(store.waiters)
    events = store.events
    if events.waiters and events.fresh:
        events.fresh = False
        wake_futures(events.waiters)


def _preorder(tree: flows.Tree) -> list[JobRecord]:
    record, children = tree
    return [record, *(r for child in children for r in _preorder(child))]


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


pace(MemoryBackend)  # its calls give the event loop turns (pacing.py)


def open_memory_backend(url: str) -> MemoryBackend:
    """Entry point of the `memory` scheme."""
    return MemoryBackend(url)
