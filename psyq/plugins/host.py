"""`PluginHost`: the plugins of one Queue or Worker, and the three ways the core calls them.

- `before_add(spec)`: synchronous, before anything is written; may transform or veto.
- `notify(hook, **kwargs)`: every implementation runs; errors are returned, never raised.
- `wrap_processor(call)`: the async onion of `psyq_process` implementations around `call`.

Plugins come from the `plugins=` argument, then `register_plugin`, then the entry point
group `psyq` (loaded once).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, TypeVar

import pluggy

from psyq.errors import JobVetoedError, PsyqError
from psyq.plugins import hookspecs
from psyq.plugins.views import AddSpec, JobView

__all__ = ["AddSpec", "PluginHost", "register_plugin", "registered_plugins", "unregister_plugin"]

J = TypeVar("J", bound=JobView)
Processor = Callable[[J], Awaitable[Any]]  # a job's processor, or a layer of the onion

_REGISTERED: list[object] = []
_ENTRY_POINT_PLUGINS: list[object] | None = None


def register_plugin(plugin: object) -> None:
    """Use `plugin` in every Queue and Worker created from now on."""
    _check(plugin)
    if plugin not in _REGISTERED:
        _REGISTERED.append(plugin)


def unregister_plugin(plugin: object) -> None:
    """Stop using a plugin given to `register_plugin` (new Queues and Workers only)."""
    if plugin in _REGISTERED:
        _REGISTERED.remove(plugin)


def registered_plugins() -> list[object]:
    """Plugins registered in code, then those of the entry point group `psyq`."""
    return [*_REGISTERED, *_entry_point_plugins()]


def _entry_point_plugins() -> list[object]:
    global _ENTRY_POINT_PLUGINS
    if _ENTRY_POINT_PLUGINS is None:
        _ENTRY_POINT_PLUGINS = [_load(ep) for ep in entry_points(group=hookspecs.PROJECT)]
    return _ENTRY_POINT_PLUGINS


def _load(ep: Any) -> object:
    try:
        plugin = ep.load()
    except Exception as exc:
        raise PsyqError(f"cannot load psyq plugin {ep.name!r} ({ep.value}): {exc}") from exc
    return plugin() if inspect.isclass(plugin) else plugin


def _manager() -> pluggy.PluginManager:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


def _check(plugin: object) -> None:
    """Reject a plugin whose hooks are misspelled or have wrong arguments, naming them."""
    _register(_manager(), plugin)


def _register(manager: pluggy.PluginManager, plugin: object) -> None:
    try:
        manager.register(plugin)
        manager.check_pending()  # a hook name with no spec is a typo
    except (pluggy.PluginValidationError, ValueError) as exc:
        raise PsyqError(f"invalid psyq plugin {_name(plugin)}: {exc}") from exc


def _name(plugin: object) -> str:
    return getattr(plugin, "__name__", None) or type(plugin).__name__


class PluginHost:
    """The plugins of one Queue or Worker."""

    def __init__(self, plugins: Sequence[object] = ()) -> None:
        self._manager = _manager()
        # pluggy calls the last registered first: register backwards so hooks run in order.
        for plugin in reversed([*plugins, *registered_plugins()]):
            if not self._manager.is_registered(plugin):
                _register(self._manager, plugin)
        self._impls = {
            name: [(_name(impl.plugin), impl.function) for impl in reversed(caller.get_hookimpls())]
            for name, caller in vars(self._manager.hook).items()
            if isinstance(caller, pluggy.HookCaller) and caller.get_hookimpls()
        }

    @property
    def plugins(self) -> list[object]:
        return list(self._manager.get_plugins())

    def has_hook(self, name: str) -> bool:
        return name in self._impls

    @property
    def has_add_hooks(self) -> bool:
        return "psyq_before_add" in self._impls

    def before_add(self, spec: AddSpec) -> None:
        """Run every add hook in registration order; raise JobVetoedError to stop the add."""
        for plugin_name, function in self._impls.get("psyq_before_add", ()):
            try:
                verdict = function(spec=spec)
            except JobVetoedError:
                raise
            except Exception as exc:
                raise JobVetoedError(
                    f"plugin {plugin_name} failed on job {spec.name!r} of {spec.queue_name!r}: "
                    f"{exc!r}"
                ) from exc
            if verdict is False:
                raise JobVetoedError(
                    f"plugin {plugin_name} vetoed job {spec.name!r} of {spec.queue_name!r}"
                )

    async def notify(self, hook: str, **kwargs: Any) -> list[BaseException]:
        """Call every implementation of `hook`; return the exceptions they raised."""
        errors: list[BaseException] = []
        for _, function in self._impls.get(hook, ()):
            try:
                result = function(**kwargs)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                errors.append(exc)
        return errors

    def wrap_processor(self, call: Processor[J]) -> Processor[J]:
        """The onion of `psyq_process` hooks around `call` (first plugin outermost)."""
        for _, function in reversed(self._impls.get("psyq_process", [])):
            call = _layer(function, call)
        return call


def _layer(middleware: Callable[..., Any], inner: Processor[J]) -> Processor[J]:
    async def layer(job: J) -> Any:
        return await middleware(job=job, call_next=inner)

    return layer
