"""A small event emitter for Worker (and later QueueEvents) callbacks.

Callbacks may be plain functions or coroutines. A coroutine callback runs as a task that the
emitter keeps until it ends. A callback that raises is reported through the `error` event
(and logged when the failing callback was itself an `error` listener), never swallowed.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["EventEmitter"]

log = logging.getLogger("psyq")

Listener = Callable[..., Any]


class EventEmitter:
    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {}
        self._listener_tasks: set[asyncio.Task[Any]] = set()

    def on(self, event: str, listener: Listener) -> EventEmitter:
        """Call `listener(*args)` every time `event` is emitted."""
        self._listeners.setdefault(event, []).append(listener)
        return self

    def once(self, event: str, listener: Listener) -> EventEmitter:
        def wrapper(*args: Any) -> Any:
            self.off(event, wrapper)
            return self._call_listener(event, listener, args)

        functools.update_wrapper(wrapper, listener)  # its signature is the listener's
        return self.on(event, wrapper)

    def off(self, event: str, listener: Listener) -> EventEmitter:
        listeners = self._listeners.get(event, [])
        if listener in listeners:
            listeners.remove(listener)
        return self

    def listener_count(self, event: str) -> int:
        return len(self._listeners.get(event, ()))

    def emit(self, event: str, *args: Any) -> bool:
        """Call the listeners of `event`; True when there was at least one."""
        listeners = self._listeners.get(event)
        if not listeners:
            return False
        for listener in list(listeners):
            try:
                result = self._call_listener(event, listener, args)
            except Exception as exc:
                self._listener_failed(event, exc)
                continue
            if result is not None and inspect.isawaitable(result):
                self._track(event, result)
        return True

    def _call_listener(self, event: str, listener: Listener, args: tuple[Any, ...]) -> Any:
        """Call one listener of `event` (a subclass may give it fewer arguments)."""
        return listener(*args)

    def _track(self, event: str, awaitable: Any) -> None:
        task = asyncio.ensure_future(awaitable)
        self._listener_tasks.add(task)
        task.add_done_callback(lambda done: self._listener_done(event, done))

    def _listener_done(self, event: str, task: asyncio.Task[Any]) -> None:
        self._listener_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._listener_failed(event, task.exception())  # type: ignore[arg-type]

    def _listener_failed(self, event: str, exc: BaseException) -> None:
        if event == "error" or not self._listeners.get("error"):
            log.error("psyq: %r listener raised", event, exc_info=exc)
            return
        self.emit("error", exc)

    async def _wait_listeners(self) -> None:
        """Wait for coroutine listeners still running (used on close)."""
        while self._listener_tasks:
            await asyncio.gather(*list(self._listener_tasks), return_exceptions=True)
