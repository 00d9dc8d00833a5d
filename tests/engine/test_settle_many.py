"""The engine's settle_many: one engine call for a batch, with the results of the
adapter's generic one (a move_to_finished or retry_job per settlement, then the fetch)."""

from __future__ import annotations

import uuid

from psyq.backends.base import (
    BackendAdapter,
    Completed,
    Failed,
    FetchRequest,
    FlowNode,
    NewJob,
    Retry,
    Settlement,
)
from psyq.backends.engine import MemoryBackend
from psyq.errors import PsyqError


def new(name: str = "j") -> NewJob:
    return NewJob(name, "null", {})


async def settled(one_call: bool) -> tuple[list[str | None], list[str], dict[str, str]]:
    """A mixed batch settled on a fresh engine, by the engine's settle_many or the generic."""
    backend = MemoryBackend(f"memory://settle-many-{uuid.uuid4().hex}")
    await backend.add_jobs("q", [new() for _ in range(6)])
    taken = await backend.move_to_active("q", FetchRequest([f"t{i}" for i in range(4)], 30_000))
    a, b, c, d = (record.id for record in taken)
    batch = [
        Settlement(a, "t0", Completed('"done"')),
        Settlement(b, "t1", Failed("bad", ["trace"])),
        Settlement(c, "t2", Retry("again")),
        Settlement(d, "wrong token", Completed("1")),  # refused: a LockError
        Settlement("404", "t9", Completed("1")),  # refused: not found
        Settlement(a, "t0", Completed('"twice"')),  # refused: already completed
    ]
    fetch = FetchRequest(["n0", "n1"], 30_000, "w")
    if one_call:
        errors, fetched = await backend.settle_many("q", batch, fetch)
    else:
        errors, fetched = await BackendAdapter.settle_many(backend, "q", batch, fetch)
    states = {job_id: await backend.get_state("q", job_id) for job_id in (a, b, c, d)}
    kinds = [None if error is None else type(error).__name__ for error in errors]
    assert all(error is None or isinstance(error, PsyqError) for error in errors)
    return kinds, [record.id for record in fetched], states


async def test_one_engine_call_settles_as_the_generic_settle_many_does() -> None:
    kinds, fetched, states = await settled(one_call=True)
    assert (kinds, fetched, states) == await settled(one_call=False)
    assert kinds[:3] == [None, None, None] and None not in kinds[3:]
    assert len(fetched) == 2
    assert list(states.values()) == ["completed", "failed", "waiting", "active"]


async def test_a_child_of_another_queue_is_settled_once_under_every_lock() -> None:
    """A batch with a flow's child (its parent in another queue) runs again under every
    lock: the plain job settled before it in the batch is not settled twice."""
    backend = MemoryBackend(f"memory://settle-many-{uuid.uuid4().hex}")
    await backend.add_jobs("kids", [new("plain")])
    await backend.add_flow([FlowNode("parents", new("parent"), [FlowNode("kids", new("kid"))])])
    taken = await backend.move_to_active("kids", FetchRequest(["t0", "t1"], 30_000))
    assert [record.name for record in taken] == ["plain", "kid"]
    batch = [Settlement(r.id, r.lock_token or "", Completed("1")) for r in taken]
    errors, fetched = await backend.settle_many("kids", batch, None)
    assert (errors, fetched) == ([None, None], [])
    assert [await backend.get_state("kids", r.id) for r in taken] == ["completed", "completed"]
    assert (await backend.get_job_counts("parents", ["waiting"]))["waiting"] == 1
