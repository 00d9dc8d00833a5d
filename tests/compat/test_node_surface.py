"""Node BullMQ 6's public surface, covered: every public method and property of `Queue`,
`Worker`, `Job`, `FlowProducer`, `QueueEvents` and `JobScheduler`, every key of their
options types and every event of their listener interfaces, in the type declarations of
the npm package the interop tests install (bullmq@6, tests/interop/conftest.py), has an
entry in psyq.compat.bullmq.node_surface: an equivalent the layer has, or the reason it has
none. docs/porting.md carries the table rendered from it (tests/compat/render_porting.py)."""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import psyq.compat.bullmq as compat
from psyq.compat.bullmq.node_surface import (
    EVENT_INHERITS,
    EVENTS,
    INHERITS,
    MEMBERS,
    OPTION_BASES,
    OPTIONS,
    entry_for,
    event_for,
    option_for,
)
from psyq.core.options import canonical_name
from tests.compat import render_porting
from tests.compat.node_dts import CLASSES, LISTENERS, OPTION_TYPES, Surface, read_surface
from tests.interop.conftest import bullmq_installs  # noqa: F401 - the npm installer fixture


@pytest.fixture(scope="module")
def surface(bullmq_installs: Callable[[str], Path]) -> Surface:  # noqa: F811 - the fixture
    return read_surface(bullmq_installs("6") / "bullmq")


def test_the_declarations_were_read(surface: Surface) -> None:
    """The reader found the classes and types (a layout change of the package fails here,
    not as an empty surface that every table covers)."""
    for cls in CLASSES:
        assert len(surface.members[cls]) >= 10, cls
    assert {"add", "getJobCounts", "close", "on"} <= set(surface.members["Queue"])
    assert {"attempts", "deduplication", "removeOnComplete"} <= surface.keys["JobsOptions"]
    assert all(surface.keys[kind] for kind in OPTION_TYPES)
    assert {"paused", "cleaned", "ioredis:close"} <= surface.events["Queue"]
    assert {"locksRenewed", "closing", "ready"} <= surface.events["Worker"]
    assert {"retries-exhausted", "deduplicated"} <= surface.events["QueueEvents"]
    assert set(surface.events) == set(LISTENERS)


def test_every_event_has_an_entry(surface: Surface) -> None:
    """Each event of Node's listener interfaces is emitted by the layer with Node's
    arguments (tests/compat/test_node_events.py, test_node_behaviour.py) or has a reason."""
    missing = [
        f"{cls} '{event}'"
        for cls, events in surface.events.items()
        for event in sorted(events)
        if event_for(cls, event) is None
    ]
    assert missing == [], "add them to psyq/compat/bullmq/node_surface/events.py EVENTS"


def test_the_event_table_names_only_what_node_declares(surface: Surface) -> None:
    """No entry for an event Node no longer declares (an inherited one: for every class)."""
    stale = [
        f"{cls} '{event}' ({listener})"
        for cls, chain in EVENT_INHERITS.items()
        for listener in chain
        for event in EVENTS.get(listener, {})
        if event not in surface.events[cls]
    ]
    assert stale == []


def test_every_public_member_has_an_equivalent_or_a_reason(surface: Surface) -> None:
    missing = [
        f"{cls}.{name} (declared by {owner})"
        for cls, members in surface.members.items()
        for name, owner in sorted(members.items())
        if entry_for(cls, name) is None
    ]
    assert missing == [], "add them to psyq/compat/bullmq/node_surface/members.py MEMBERS"


def test_every_option_has_an_equivalent_or_a_reason(surface: Surface) -> None:
    missing = [
        f"{kind}.{key}"
        for kind, keys in surface.keys.items()
        for key in sorted(keys)
        if option_for(kind, key) is None
    ]
    assert missing == [], "add them to psyq/compat/bullmq/node_surface/options.py OPTIONS"


def test_the_table_names_only_what_node_declares(surface: Surface) -> None:
    """No entry for a name Node no longer has (the table would promise a call of nobody's)."""
    stale = [
        f"{cls}.{name}"
        for cls, chain in INHERITS.items()
        for owner in chain
        for name in MEMBERS.get(owner, {})
        if name not in surface.members[cls]
    ]
    declared = {kind: surface.keys[kind] for kind in OPTION_TYPES}
    for kind, table in OPTIONS.items():
        users = [k for k, bases in OPTION_BASES.items() if kind in bases] or [kind]
        stale += [f"{kind}.{key}" for key in table if not any(key in declared[u] for u in users)]
    assert stale == []


@pytest.fixture
async def layer() -> AsyncIterator[dict[str, Any]]:
    """One object of each of the layer's classes, on memory://."""
    opts = {"connection": "memory://"}
    queue = compat.Queue("surface", opts)
    worker = compat.Worker("surface", None, opts)
    flow = compat.FlowProducer(opts)
    events = compat.QueueEvents("surface", {**opts, "autorun": False})
    objects = {
        "Queue": queue,
        "Worker": worker,
        "Job": compat.Job(queue, "n", {}),
        "FlowProducer": flow,
        "QueueEvents": events,
        "JobScheduler": compat.JobScheduler(queue),
    }
    yield objects
    await worker.close()
    await events.close()
    await flow.close()
    await queue.close()


async def test_every_equivalent_exists_in_the_layer(layer: dict[str, Any]) -> None:
    """Each entry's compat call starts with a name the layer's object has."""
    absent = []
    for cls, chain in INHERITS.items():
        for owner in chain:
            for name, entry in MEMBERS.get(owner, {}).items():
                if entry_for(cls, name) is not entry or not entry.covered:
                    continue
                attribute = re.match(r"\w+", entry.compat)
                if attribute is None or not hasattr(layer[cls], attribute[0]):
                    absent.append(f"{cls}.{name} -> {entry.compat}")
    assert absent == []


def test_job_options_with_an_equivalent_are_psyqs() -> None:
    """Each job option the table says the layer takes is one psyq's core knows."""
    for key, entry in OPTIONS["JobsOptions"].items():
        if entry.covered:
            assert canonical_name(key) == key


def test_porting_doc_carries_the_current_table() -> None:
    page = render_porting.PAGE.read_text(encoding="utf-8")
    assert render_porting.section(page) == render_porting.render(), (
        "docs/porting.md is stale: run `python -m tests.compat.render_porting`"
    )


def _takes(function: Any, count: int) -> bool:
    """Whether `function` can be called with `count` positional arguments (any number
    for -1, Node's rest parameter)."""
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return True  # a builtin: nothing to read
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return count >= 0 and len(positional) >= count


async def test_every_equivalent_takes_nodes_arguments(
    surface: Surface, layer: dict[str, Any]
) -> None:
    """Each method with an equivalent takes as many positional arguments as Node's
    declaration has parameters (a port calls it as Node does)."""
    short = []
    for cls, arities in surface.arity.items():
        for name, count in sorted(arities.items()):
            entry = entry_for(cls, name)
            if entry is None or not entry.covered or not entry.compat.startswith(f"{name}("):
                continue
            method = getattr(layer[cls], name)
            if callable(method) and not _takes(method, count):
                short.append(f"{cls}.{name}: Node has {count}, {inspect.signature(method)}")
    assert short == []
