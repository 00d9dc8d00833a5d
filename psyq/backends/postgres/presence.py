"""Workers and QueueEvents seen by Node BullMQ: one idle, named connection per running psyq
worker, and per queue whose events a backend reads.

Node BullMQ 6 on Postgres lists a queue's workers (`getWorkers`) from `pg_stat_activity`:
the sessions of the database whose `application_name` is `<queue>` or `<queue>:w:<name>`,
which is how each Node worker names its own LISTEN connection. psyq's workers share one
LISTEN connection per backend (listen.py), named after no queue, so each registered worker
also holds one connection of its own, named `<queue>:w:psyq` (the name psyq's workers carry
on Redis too: its own get_workers lists them from its registry, and skips these sessions).
The connection runs no statement; it is opened when the worker registers, closed when it
unregisters (or the backend closes), and opened again, after a capped backoff, whenever it
is lost. Naming is best-effort, as Node's is: a failure is logged, never raised.

A running QueueEvents is announced the same way: Node lists a queue's QueueEvents
(`getQueueEvents`) as the sessions named `<queue>:qe`, the name each Node QueueEvents gives
its LISTEN connection; psyq's QueueEvents read through the shared LISTEN connection, so the
backend holds one idle session named `<queue>:qe` per queue it reads events of, from the
first read until no read of that queue has been under way for READER_LINGER_S (events.py).

Cost: one server connection (one Postgres backend process, a few MB) per running worker;
`?announce_workers=false` turns it off, and Node's getWorkers then lists no psyq worker
(nor getQueueEvents a psyq QueueEvents).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import asyncpg

from psyq.backends.postgres.retry import SESSION_LOST
from psyq.rules.reconnect import Reconnect

__all__ = [
    "PSYQ_WORKER_SUFFIX",
    "QUEUE_EVENTS_SUFFIX",
    "Presence",
    "queue_events_session_name",
    "worker_session_name",
]

log = logging.getLogger("psyq.postgres")
PSYQ_WORKER_SUFFIX = ":w:psyq"
QUEUE_EVENTS_SUFFIX = ":qe"  # Node BullMQ's QUEUE_EVENT_SUFFIX
FIRST_WAIT_S = 5.0  # how long registering a worker waits for its session to open
RETRY_CAP_S = 30.0  # the longest wait between attempts (a full server is not hammered)
_LOST = SESSION_LOST


def worker_session_name(queue: str) -> str:
    """The application_name of a psyq worker's session: `<queue>:w:psyq` (Postgres keeps
    the first 63 bytes, so Node sees a worker of a queue named in at most 60, the same
    limit its own workers have)."""
    return queue + PSYQ_WORKER_SUFFIX


def queue_events_session_name(queue: str) -> str:
    """The application_name Node BullMQ 6 lists a queue's QueueEvents by: `<queue>:qe`."""
    return queue + QUEUE_EVENTS_SUFFIX


class Presence:
    """Named idle connections, one per key, each held by a task until removed."""

    def __init__(self, connect: Callable[[str], Awaitable[asyncpg.Connection]]) -> None:
        self._connect = connect  # application_name -> a new connection
        self._held: dict[Hashable, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._held)

    async def add(self, key: Hashable, name: str) -> None:
        """Hold a connection named `name` for `key`; returns once the first attempt to open
        it is over (opened or failed: then it is tried again in the background), or after
        FIRST_WAIT_S, so a worker's start never waits long on it."""
        if key in self._held and not self._held[key].done():
            return
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = self._held[key] = asyncio.create_task(self._hold(name, ready))
        await asyncio.wait({ready, task}, timeout=FIRST_WAIT_S, return_when="FIRST_COMPLETED")

    async def remove(self, key: Hashable) -> None:
        task = self._held.pop(key, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        for key in list(self._held):
            await self.remove(key)

    async def _hold(self, name: str, ready: asyncio.Future[None]) -> None:
        backoff = Reconnect(cap_s=RETRY_CAP_S)
        while True:
            await backoff.wait()
            try:
                conn = await _connect_whole(self._connect(name))
            except _LOST as exc:
                level = logging.DEBUG if backoff.failures else logging.WARNING  # once a run
                log.log(
                    level, "psyq: cannot open the session %r Node lists workers by: %r", name, exc
                )
                backoff.failed()
                _done(ready)
                continue
            backoff.succeeded()
            _done(ready)
            await _until_lost(conn)


async def _connect_whole(connecting: Awaitable[asyncpg.Connection]) -> asyncpg.Connection:
    """Await a connect; when cancelled meanwhile, the connection it still opens is closed
    (terminated) rather than left open."""
    task = asyncio.ensure_future(connecting)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_drop)
        raise


def _drop(task: asyncio.Future[asyncpg.Connection]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().terminate()


async def _until_lost(conn: asyncpg.Connection) -> None:
    """Wait until `conn` is lost; close it when the wait is cancelled."""
    lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_lost(_: Any) -> None:
        _done(lost)

    conn.add_termination_listener(on_lost)
    try:
        if not conn.is_closed():
            await lost
    finally:
        if not conn.is_closed():
            with contextlib.suppress(*_LOST):
                await asyncio.shield(conn.close(timeout=2))


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
