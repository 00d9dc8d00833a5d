"""What every part of a Worker (psyq.core.fetching, settling, locks) is given besides the
shared `Slots` and `Takes`: the worker's options (`Configured`) and a way to report
(`Reports`: the worker's events and its plugins' hooks). `Hooks` is the Worker's
`Reports`; a part's test gives a fake of either Protocol."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from psyq.core.worker_options import WorkerOptions
from psyq.plugins import PluginHost

__all__ = ["Configured", "Hooks", "Reports", "log"]

log = logging.getLogger("psyq.worker")


class Configured(Protocol):
    """The worker's options as they are now (a part reads them at each use: they may be
    changed while the worker runs)."""

    @property
    def options(self) -> WorkerOptions: ...


class Reports(Protocol):
    """How a part tells the world what happened."""

    def emit(self, event: str, *args: Any) -> bool:
        """Emit a worker event (`error`, `drained`, `completed`, ...)."""

    def has_hook(self, hook: str) -> bool:
        """Whether a plugin implements `hook` (a worker's plugins are fixed)."""

    async def notify(self, hook: str, **kwargs: Any) -> None:
        """Call the plugins' `hook`; a plugin that raises is the worker's `error`."""


class Hooks:
    """The worker's `Reports`: its `emit` and its plugin host."""

    __slots__ = ("_plugins", "emit")

    def __init__(self, emit: Callable[..., bool], plugins: PluginHost) -> None:
        self.emit = emit
        self._plugins = plugins

    def has_hook(self, hook: str) -> bool:
        return self._plugins.has_hook(hook)

    async def notify(self, hook: str, **kwargs: Any) -> None:
        plugins = self._plugins
        if not plugins.has_hook(hook):
            return
        for error in await plugins.notify(hook, **kwargs):
            self.emit("error", error)
