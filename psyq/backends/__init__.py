"""Backend selection by URL.

`open_backend(connection)` turns a URL (or None: `PSYQ_URL`, else the embedded default) into a
shared, opened `BackendAdapter`. Objects of one event loop that share a URL share one backend;
`release_backend` closes it when its last user lets go. Backends register by URL scheme, in
code (`register_backend`) or through the entry point group `psyq.backends`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from urllib.parse import urlsplit

from psyq.backends.base import BackendAdapter
from psyq.errors import InvalidURLError

__all__ = [
    "DEFAULT_URL",
    "BackendFactory",
    "open_backend",
    "register_backend",
    "release_backend",
    "resolve_url",
]

log = logging.getLogger("psyq")

# The embedded default: the engine persisted to ./psyq.db (no server to run).
DEFAULT_URL = "sqlite:///psyq.db"

BackendFactory = Callable[[str], BackendAdapter]

_FACTORIES: dict[str, BackendFactory] = {}


@dataclass
class _Shared:
    backend: BackendAdapter
    users: int


# loop -> URL -> shared backend. Keyed by the loop object (weakly), not id(loop): a new loop
# can get the id of a closed one, and must not be handed a backend left open on that one.
_OPEN: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Shared]] = (
    weakref.WeakKeyDictionary()
)


def register_backend(scheme: str, factory: BackendFactory) -> None:
    """Handle URLs of `scheme` with `factory(url) -> BackendAdapter`."""
    _FACTORIES[scheme.lower()] = factory


def resolve_url(connection: str | None) -> str:
    """The URL to use: `connection`, else `PSYQ_URL`, else the embedded default."""
    return connection or os.environ.get("PSYQ_URL") or DEFAULT_URL


def _factory_for(url: str) -> BackendFactory:
    scheme = urlsplit(url).scheme.lower()
    if not scheme:
        raise InvalidURLError(url, "it has no scheme (expected e.g. memory:// or redis://)")
    if scheme not in _FACTORIES:
        for ep in entry_points(group="psyq.backends"):
            if ep.name.lower() == scheme:
                _FACTORIES[scheme] = ep.load()
    if scheme not in _FACTORIES:
        known = sorted(_FACTORIES)
        raise InvalidURLError(url, f"no backend handles {scheme!r}; installed: {known}")
    return _FACTORIES[scheme]


async def open_backend(connection: str | BackendAdapter | None) -> BackendAdapter:
    """Return an opened backend for `connection`, shared per URL within this event loop."""
    if isinstance(connection, BackendAdapter):
        return connection
    if connection is not None and not isinstance(connection, str):
        raise InvalidURLError(repr(connection), "a connection is a URL string or a backend")
    url = resolve_url(connection)
    opened = _OPEN.setdefault(asyncio.get_running_loop(), {})
    shared = opened.get(url)
    if shared is None:
        backend = await _join_opening(url)
        shared = opened.setdefault(url, _Shared(backend, 0))
        if shared.backend is not backend:  # opened again by a caller that came later
            await backend.close()
    shared.users += 1
    return shared.backend


@dataclass
class _Opening:
    """One open under way, shared by every caller that asks for its URL meanwhile."""

    task: asyncio.Task[BackendAdapter]
    waiters: int = 0


# loop -> URL -> the open under way (weakly keyed, as _OPEN)
_OPENING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Opening]] = (
    weakref.WeakKeyDictionary()
)


async def _join_opening(url: str) -> BackendAdapter:
    """The backend of `url`, opened once for all the callers that ask while it opens (200
    first adds at once open one connection, not 200); cancelled when they all leave."""
    pending = _OPENING.setdefault(asyncio.get_running_loop(), {})
    opening = pending.get(url)
    if opening is None:
        opening = pending[url] = _Opening(asyncio.ensure_future(_opened(url)))
        opening.task.add_done_callback(lambda _: pending.pop(url, None))
    opening.waiters += 1
    try:
        return await asyncio.shield(opening.task)
    except asyncio.CancelledError:
        opening.waiters -= 1
        if opening.waiters == 0:
            await _abandon(opening.task)
        raise


async def _opened(url: str) -> BackendAdapter:
    backend = _factory_for(url)(url)
    await backend.open()
    return backend


async def _abandon(task: asyncio.Task[BackendAdapter]) -> None:
    """No caller waits for this open any more: stop it, or close what it opened, before the
    last caller's cancellation goes on (a close left to run later could outlive the event
    loop, and its connections be found unclosed)."""
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # its own cleanup, then done
    if not task.cancelled() and task.exception() is None:
        try:
            await task.result().close()
        except Exception:  # the caller's cancellation goes on; the failure is reported
            log.exception("psyq: closing a backend opened for callers that left failed")


async def release_backend(backend: BackendAdapter) -> None:
    """Drop one use of a shared backend; close it when nobody uses it any more."""
    for opened in list(_OPEN.values()):
        for url, shared in list(opened.items()):
            if shared.backend is backend:
                shared.users -= 1
                if shared.users <= 0:
                    del opened[url]
                    await backend.close()
                return


def _register_builtins() -> None:
    from psyq.backends.engine import open_memory_backend
    from psyq.backends.sqlite import open_sqlite_backend

    register_backend("memory", open_memory_backend)
    register_backend("sqlite", open_sqlite_backend)


_register_builtins()
