"""The engine: queue stores spread over shards, each shard with its own lock.

A queue lives in the shard picked by the FNV-1a hash of its key, so queues of different
shards never contend for a lock. Engines are named (`memory://name`) and live as long as the
process, so every object that opens the same URL — in any thread or event loop — sees the
same jobs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from psyq.backends.engine.state import StoreState
from psyq.backends.engine.store import QueueStore
from psyq.rules.clock import Clock, system_clock

__all__ = ["Engine", "fnv1a", "named_engine"]

SHARDS = 16
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a(text: str) -> int:
    """32-bit FNV-1a of the UTF-8 bytes of `text`."""
    value = _FNV_OFFSET
    for byte in text.encode():
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


class Shard:
    __slots__ = ("lock", "stores")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stores: dict[str, QueueStore] = {}


class Engine:
    """Queue stores by key ("<prefix>:<queue>"), sharded; one clock for all of them."""

    def __init__(
        self, clock: Clock = system_clock, shards: int = SHARDS, persistent: bool = False
    ) -> None:
        self.clock = clock
        self.persistent = persistent  # stores track their changes for a flush (sqlite)
        self.shards = [Shard() for _ in range(shards)]
        self._shard_of: dict[str, Shard] = {}
        # Set while one caller holds every lock (cross-queue transitions such as flows).
        self.all_locked = False
        # Stores a cross-queue transition made ready; their workers are woken afterwards.
        self.touched: set[StoreState] = set()
        # Called with each new store (a persisted engine gives it file-backed parts), and
        # with the key of each dropped one under its lock (its rows go with it).
        self.on_new_store: Callable[[QueueStore], object] | None = None
        self.on_drop: Callable[[str], object] | None = None
        # The next event number of each obliterated queue: its new log numbers on from
        # there, so a reader does not take the numbers going back for a restart.
        self._next_event_seq: dict[str, int] = {}
        clock.subscribe(self.wake_all)

    def shard(self, key: str) -> Shard:
        shard = self._shard_of.get(key)
        if shard is None:
            shard = self.shards[fnv1a(key) % len(self.shards)]
            self._shard_of[key] = shard
        return shard

    def store(self, shard: Shard, key: str, name: str) -> QueueStore:
        """The store of `key` (call with `shard.lock` held); created on first use."""
        store = shard.stores.get(key)
        if store is None:
            store = shard.stores[key] = QueueStore(name, key, self)
            if self.persistent:
                store.dirty = set()
            if self.on_new_store is not None:
                self.on_new_store(store)
            next_seq = self._next_event_seq.pop(key, None)
            if next_seq is not None:
                store.events.number_from(next_seq)
        return store

    def existing_store(self, key: str) -> QueueStore | None:
        """The store of `key` if it exists (call with every lock held)."""
        return self.shard(key).stores.get(key)

    def store_for_key(self, key: str) -> QueueStore:
        """The store of `key`, created if needed (call with every lock held)."""
        return self.store(self.shard(key), key, key.split(":", 1)[1])

    @contextmanager
    def every_lock(self) -> Iterator[None]:
        """Hold all shard locks (in a fixed order, so two holders never deadlock)."""
        with ExitStack() as stack:
            for shard in self.shards:
                stack.enter_context(shard.lock)
            self.all_locked = True
            try:
                yield
            finally:
                self.all_locked = False
                touched, self.touched = self.touched, set()
                for store in touched:
                    wake(store)

    def drop(self, key: str) -> QueueStore | None:
        shard = self.shard(key)
        with shard.lock:
            store = shard.stores.pop(key, None)
            if store is not None:
                self._next_event_seq[key] = store.events.next_seq
                if self.on_drop is not None:
                    self.on_drop(key)
            return store

    def queue_keys(self) -> Iterator[str]:
        for shard in self.shards:
            with shard.lock:
                keys = list(shard.stores)
            yield from keys

    def wake_all(self) -> None:
        """Wake every blocked worker (the clock jumped)."""
        for shard in self.shards:
            with shard.lock:
                for store in shard.stores.values():
                    wake(store)


def wake(store: StoreState) -> None:
    """Wake the workers and event readers blocked on `store`, in whatever thread or event
    loop they run."""
    wake_futures(store.waiters)
    wake_futures(store.events.waiters)


def wake_futures(futures: set[asyncio.Future[None]]) -> None:
    """Resolve and forget `futures`, each in its own event loop."""
    if not futures:
        return
    waiters = list(futures)
    futures.clear()
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for future in waiters:
        loop = future.get_loop()
        if loop is running:
            _settle(future)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_settle, future)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def named_engine(name: str) -> Engine:
    """The process-wide engine called `name` (created on first use)."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(name)
        if engine is None:
            engine = _ENGINES[name] = Engine()
        return engine
