"""Flows on the engine: job trees across queues, and what a child's end does to its
parent. Every function here runs with all of the engine's locks held.

A child knows its parent by `opts["parent"] = {"id", "queue"}` (the parent queue's key, as
BullMQ stores it) and `record.parent_key` ("<prefix>:<queue>:<id>"). A parent keeps, per
child key, whether the child is pending, processed (with its return value), failed, or
ignored. When nothing is pending, a parent in waiting-children moves to waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from psyq.backends.base import Dependencies, FlowNode, FlowTree, JobRecord, NewJob
from psyq.backends.engine.state import StoreState
from psyq.backends.engine.view import Adding, EngineView
from psyq.errors import JobNotFoundError

__all__ = [
    "Tree",
    "add_tree",
    "check_flow",
    "child_finished",
    "child_removed",
    "get_tree",
    "remove_children",
]

# A flow's added job and the trees of its children.
Tree = tuple[JobRecord, list["Tree"]]

POLICIES = (
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
    "removeDependencyOnFailure",
)


def split_key(job_key: str) -> tuple[str, str]:
    """("<prefix>:<queue>", id) of a job key; queue names and prefixes hold no ':'."""
    prefix, queue, job_id = job_key.split(":", 2)
    return f"{prefix}:{queue}", job_id


def add_tree(
    store_of: Callable[[str], Adding], node: FlowNode, now: int, parent: tuple[Adding, str] | None
) -> Tree:
    """Add `node` and its children; returns (record, [child results...])."""
    store = store_of(node.queue)
    new = node.job
    if parent is not None:
        link = {"id": parent[1], "queue": parent[0].key}
        new = NewJob(new.name, new.data, {**new.opts, "parent": link}, new.timestamp)
    custom = new.opts.get("jobId")
    if custom is not None and custom in store.jobs:
        record = store.jobs[custom]
    else:
        record = store.add(new, now, hold=bool(node.children))
    children = [add_tree(store_of, child, now, (store, record.id)) for child in node.children]
    return record, children


def check_flow(
    engine: EngineView[StoreState], store_of: Callable[[str], Adding], roots: Sequence[FlowNode]
) -> None:
    """Before any job of a flow is added: a root's own parent exists, and no group of any
    queue would pass its maxSize (the flow's grouped jobs counted with the group's)."""
    grouped: dict[str, list[NewJob]] = {}
    sized: set[str] = set()
    nodes = list(roots)
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children)
        group = node.job.opts.get("group")
        if group is not None:
            grouped.setdefault(node.queue, []).append(node.job)
            if "maxSize" in group:
                sized.add(node.queue)
    for root in roots:  # a root may name a parent of its own: it must exist
        if root.job.opts.get("parent"):
            check_parent(engine, root.job.opts["parent"])
    for queue in sorted(sized):
        store_of(queue).check_group_sizes(grouped[queue])


def check_parent(engine: EngineView[StoreState], parent: dict[str, Any]) -> None:
    """A job added with `parent` needs that parent to exist (nothing is written otherwise)."""
    parent_store = engine.existing_store(parent["queue"])
    if parent_store is None or parent["id"] not in parent_store.jobs:
        raise JobNotFoundError(parent["queue"], parent["id"])


def link_child(store: StoreState, record: JobRecord) -> None:
    """Record a new child as pending in its parent."""
    parent = record.opts["parent"]
    parent_store = store.engine.existing_store(parent["queue"])
    # the parent's record (with its links) in memory before its links change
    if parent_store is not None and parent_store.jobs.get(parent["id"]) is not None:
        parent_store.pending.setdefault(parent["id"], set()).add(store.job_key(record.id))
        parent_store.mark(parent["id"])


def _parent_of(store: StoreState, record: JobRecord) -> tuple[StoreState, JobRecord] | None:
    """The parent's store and record; from the `parent` option, else from the parent key
    (a child imported from BullMQ's Postgres layout, which keeps its parent in columns,
    comes with the key alone: an import writes keys in this engine's form)."""
    parent = record.opts.get("parent")
    if parent:
        queue_key, parent_id = parent["queue"], parent["id"]
    elif record.parent_key:
        queue_key, parent_id = split_key(record.parent_key)
    else:
        return None
    parent_store = store.engine.existing_store(queue_key)
    if parent_store is None:
        return None
    parent_record = parent_store.jobs.get(parent_id)
    return None if parent_record is None else (parent_store, parent_record)


def child_finished(store: StoreState, record: JobRecord, now: int, completed: bool) -> None:
    """A child completed (`completed`) or failed for good: update its parent. The outcome is
    passed in, not read from the record: a child removed when it finished (removeOnComplete)
    has no state left, and its value still goes to its parent, as in BullMQ."""
    found = _parent_of(store, record)
    if found is None:
        return
    parent_store, parent = found
    parent_store.mark(parent.id)
    child_key = store.job_key(record.id)
    pending = parent_store.pending.setdefault(parent.id, set())
    if completed:
        pending.discard(child_key)
        parent_store.processed.setdefault(parent.id, {})[child_key] = record.returnvalue or "null"
        _maybe_release(parent_store, parent)
        return
    reason = record.failed_reason or ""
    policy = next((name for name in POLICIES if record.opts.get(name)), None)
    if policy == "failParentOnFailure":
        _fail_parent(parent_store, parent, child_key, now)
    elif policy == "continueParentOnFailure":
        pending.discard(child_key)
        parent_store.failed_children.setdefault(parent.id, {})[child_key] = reason
        _release(parent_store, parent)
    elif policy == "ignoreDependencyOnFailure":
        pending.discard(child_key)
        parent_store.ignored.setdefault(parent.id, {})[child_key] = reason
        _maybe_release(parent_store, parent)
    elif policy == "removeDependencyOnFailure":
        pending.discard(child_key)
        _maybe_release(parent_store, parent)
    else:
        parent_store.failed_children.setdefault(parent.id, {})[child_key] = reason


def _maybe_release(store: StoreState, parent: JobRecord) -> None:
    if not store.pending.get(parent.id):
        _release(store, parent)


def _release(store: StoreState, parent: JobRecord) -> None:
    """A parent in waiting-children moves on (to waiting, or delayed if it has a delay)."""
    if parent.state != "waiting-children":
        return
    store._detach(parent)
    store.engine.touched.add(store)
    if parent.delay > 0:
        store._delay(parent, store.clock.now_ms() + parent.delay)
    else:
        store.to_wait(parent, "waiting-children")


def _fail_parent(store: StoreState, parent: JobRecord, child_key: str, now: int) -> None:
    if parent.state != "waiting-children":
        return
    store._detach(parent)
    parent.finished_on = now
    store._fail(parent, f"child {child_key} failed", parent.stacktrace, now)
    if parent.parent_key is not None:
        child_finished(store, parent, now, completed=False)


def child_removed(store: StoreState, record: JobRecord) -> None:
    """A child went away: it no longer holds its parent back."""
    found = _parent_of(store, record)
    if found is None:
        return
    parent_store, parent = found
    parent_store.mark(parent.id)
    child_key = store.job_key(record.id)
    pending = parent_store.pending.get(parent.id)
    if pending is not None and child_key in pending:
        pending.discard(child_key)
        _maybe_release(parent_store, parent)


def children_keys(store: StoreState, job_id: str) -> list[str]:
    keys: list[str] = sorted(store.pending.get(job_id, ()))
    for links in (store.processed, store.failed_children, store.ignored):
        keys.extend(links.get(job_id, {}))
    return keys


def remove_children(store: StoreState, job_id: str) -> None:
    """Remove every child (and their children) that is not being processed."""
    for child_key in children_keys(store, job_id):
        queue_key, child_id = split_key(child_key)
        child_store = store.engine.existing_store(queue_key)
        if child_store is None:
            continue
        child = child_store.jobs.get(child_id)
        if child is None or child.state == "active":
            continue
        remove_children(child_store, child_id)
        prev = child.state
        child_store._drop(child)
        child_store.emit("removed", child_id, {"prev": prev})


def get_tree(store: StoreState, job_id: str, depth: int, max_children: int) -> FlowTree | None:
    """{"job": record, "children": [...]} down to `depth` levels (0 = unlimited)."""
    record = store.jobs.get(job_id)
    if record is None:
        return None
    children: list[FlowTree] = []
    if depth != 1:
        for child_key in children_keys(store, job_id)[: max_children or None]:
            queue_key, child_id = split_key(child_key)
            child_store = store.engine.existing_store(queue_key)
            if child_store is None:
                continue
            node = get_tree(child_store, child_id, max(0, depth - 1), max_children)
            if node is not None:
                children.append(node)
    return {"job": record, "children": children}


def dependencies(store: StoreState, job_id: str) -> Dependencies:
    store.jobs.get(job_id)  # its links in memory, if it was only in the file
    return {
        "processed": dict(store.processed.get(job_id, {})),
        "unprocessed": sorted(store.pending.get(job_id, ())),
        "failed": dict(store.failed_children.get(job_id, {})),
        "ignored": dict(store.ignored.get(job_id, {})),
    }
