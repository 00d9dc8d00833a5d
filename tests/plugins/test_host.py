"""PluginHost: add-side veto and transform, notifications, the processing onion."""

from __future__ import annotations

from typing import Any

import pytest

import psyq
from psyq.plugins import AddSpec, PluginHost, hookimpl


class Upper:
    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> None:
        spec.name = spec.name.upper()
        spec.opts["priority"] = 3


class Refuse:
    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> bool:
        return bool(spec.name != "forbidden")


class Broken:
    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> None:
        raise KeyError("oops")


def test_add_hook_transforms_the_spec() -> None:
    host = PluginHost([Upper()])
    spec = AddSpec("q", "send", {"a": 1}, {})
    assert host.has_add_hooks
    host.before_add(spec)
    assert (spec.name, spec.opts) == ("SEND", {"priority": 3})


def test_returning_false_vetoes_naming_the_plugin() -> None:
    host = PluginHost([Refuse()])
    host.before_add(AddSpec("q", "fine", None, {}))
    with pytest.raises(psyq.JobVetoedError, match=r"Refuse.*forbidden"):
        host.before_add(AddSpec("q", "forbidden", None, {}))


def test_a_raised_veto_passes_through_and_other_errors_become_vetoes() -> None:
    class Veto:
        @hookimpl
        def psyq_before_add(self, spec: AddSpec) -> None:
            raise psyq.JobVetoedError("quota exceeded")

    with pytest.raises(psyq.JobVetoedError, match=r"^quota exceeded$"):
        PluginHost([Veto()]).before_add(AddSpec("q", "x", None, {}))
    with pytest.raises(psyq.JobVetoedError, match=r"Broken.*oops") as err:
        PluginHost([Broken()]).before_add(AddSpec("q", "x", None, {}))
    assert isinstance(err.value.__cause__, KeyError)


async def test_notify_collects_errors_from_sync_and_async_hooks() -> None:
    seen: list[str] = []

    class Sync:
        @hookimpl
        def psyq_job_stalled(self, queue_name: str, job_id: str) -> None:
            seen.append(f"sync {job_id}")
            raise ValueError("sync hook broke")

    class Async:
        @hookimpl
        async def psyq_job_stalled(self, queue_name: str, job_id: str) -> None:
            seen.append(f"async {job_id}")
            raise RuntimeError("async hook broke")

    host = PluginHost([Sync(), Async()])
    errors = await host.notify("psyq_job_stalled", queue_name="q", job_id="7")
    assert seen == ["sync 7", "async 7"]
    assert [type(e) for e in errors] == [ValueError, RuntimeError]
    assert await host.notify("psyq_job_failed", job=None, error=None) == []


async def test_onion_runs_first_plugin_outermost() -> None:
    calls: list[str] = []

    def layer(label: str) -> object:
        class Layer:
            @hookimpl
            async def psyq_process(self, job: Any, call_next: Any) -> Any:
                calls.append(f"{label} in")
                result = await call_next(job)
                calls.append(f"{label} out")
                return f"{label}({result})"

        return Layer()

    async def processor(job: Any) -> str:
        calls.append("processor")
        return "r"

    run = PluginHost([layer("a"), layer("b")]).wrap_processor(processor)
    assert await run(object()) == "a(b(r))"
    assert calls == ["a in", "b in", "processor", "b out", "a out"]


def test_no_process_hook_means_no_wrapping() -> None:
    async def processor(job: Any) -> None:
        return None

    assert PluginHost([Upper()]).wrap_processor(processor) is processor
    assert not PluginHost([]).has_add_hooks


def test_misspelled_hook_is_rejected_naming_it() -> None:
    class Typo:
        @hookimpl
        def psyq_job_complete(self, job: Any) -> None: ...

    with pytest.raises(psyq.PsyqError, match="psyq_job_complete"):
        PluginHost([Typo()])
    with pytest.raises(psyq.PsyqError, match="psyq_job_complete"):
        psyq.register_plugin(Typo())


def test_registered_plugins_join_every_new_host() -> None:
    plugin = Refuse()
    psyq.register_plugin(plugin)
    try:
        assert plugin in PluginHost([]).plugins
    finally:
        psyq.unregister_plugin(plugin)
    assert plugin not in PluginHost([]).plugins
