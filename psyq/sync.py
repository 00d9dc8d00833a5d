"""A synchronous facade for code that is not async (Django, Flask, scripts).

`psyq.sync.Queue` has the same methods as `psyq.Queue`; each call runs on one background
event loop thread shared by the process and returns its result. Jobs come back as
`psyq.sync.Job`, whose methods are synchronous too.

    from psyq.sync import Queue
    queue = Queue("emails", connection="redis://localhost:6379/0")
    job = queue.add("send", {"to": "a@b.c"})
    print(job.id, job.get_state())
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from psyq.core import job as _job
from psyq.core import queue as _queue

__all__ = ["Job", "Queue", "run"]

T = TypeVar("T")


class _LoopThread:
    """One event loop in a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="psyq-sync", daemon=True)
                thread.start()
                self._loop = loop
            return self._loop

    def run(self, awaitable: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop()).result()


_runner = _LoopThread()


def run(awaitable: Awaitable[T]) -> T:
    """Run a psyq coroutine on the facade's loop and return its result."""
    return _runner.run(awaitable)


def _wrap(value: Any) -> Any:
    if isinstance(value, _job.Job):
        return Job(value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


class _SyncProxy:
    """Calls the wrapped object's coroutine methods synchronously."""

    _target: Any

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return _wrap(run(attr(*args, **kwargs)))

        return call

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._target)))


class Job(_SyncProxy):
    """A job whose methods block until done (see psyq.Job for the methods)."""

    def __init__(self, job: _job.Job) -> None:
        self._target = job

    def __repr__(self) -> str:
        return repr(self._target)


class Queue(_SyncProxy):
    """psyq.Queue with blocking methods. Takes the same arguments."""

    def __init__(self, name: str, connection: Any = None, **kwargs: Any) -> None:
        async def make() -> _queue.Queue:
            return _queue.Queue(name, connection, **kwargs)

        self._target = run(make())
        atexit.register(self._close_quietly)

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        run(self._target.close())

    def _close_quietly(self) -> None:
        if not self._target._closed:
            try:
                self.close()
            except Exception:
                logging.getLogger("psyq").exception("psyq.sync: closing %r at exit", self)
