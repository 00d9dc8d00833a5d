"""`FlowProducer`: add trees of jobs across queues atomically; read them back.

    flow = psyq.FlowProducer()
    node = await flow.add({"name": "report", "queue_name": "reports", "data": {...},
                           "children": [{"name": "part", "queue_name": "parts"}]})
    node.job, node.children

A parent waits in `waiting-children` until its last child completes. A child's options may
set what its failure does to the parent: failParentOnFailure, continueParentOnFailure,
ignoreDependencyOnFailure or removeDependencyOnFailure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psyq.backends.base import BackendAdapter, FlowNode, JobRecord
from psyq.core import gate
from psyq.core.job import Job, QueueRef
from psyq.core.queue import _BackendUser, check_queue_name
from psyq.errors import InvalidOptionsError
from psyq.rules.limits import check_int
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["FlowProducer", "JobNode"]

_NODE_KEYS = frozenset({"name", "queue_name", "queueName", "data", "opts", "children", "prefix"})


@dataclass
class JobNode:
    """A job of a flow and its children."""

    job: Job
    children: list[JobNode] = field(default_factory=list)


class FlowProducer(_BackendUser):
    """Adds and reads flows on one backend (any queues of it)."""

    def __init__(
        self, connection: str | BackendAdapter | None = None, *, prefix: str = DEFAULT_PREFIX
    ) -> None:
        _BackendUser.__init__(self, "flow-producer", connection, prefix)

    async def __aenter__(self) -> FlowProducer:
        await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._release()

    async def add(self, flow: Mapping[str, Any], *, transaction: object = None) -> JobNode:
        """Add one tree atomically; returns its nodes with their jobs. `transaction`: a
        connection inside the application's open transaction to write the tree on
        (Postgres only; docs/transactions.md)."""
        [node] = await self.add_bulk([flow], transaction=transaction)
        return node

    async def add_bulk(
        self, flows: Sequence[Mapping[str, Any]], *, transaction: object = None
    ) -> list[JobNode]:
        """Add several trees in one atomic step: all are written, or none. `transaction`:
        as in add."""
        roots = [
            _node(flow, f"flows[{i}]", set(), self.allow_empty_name) for i, flow in enumerate(flows)
        ]
        backend = await self._open()
        if transaction is None:
            added = await backend.add_flow(roots)
        else:
            added = await backend.add_flow_in(transaction, roots)
        records = iter(added)
        return [self._rebuild(backend, root, records) for root in roots]

    def _rebuild(
        self, backend: BackendAdapter, node: FlowNode, records: Iterator[JobRecord]
    ) -> JobNode:
        job = Job(QueueRef(node.queue, backend), next(records))
        return JobNode(job, [self._rebuild(backend, child, records) for child in node.children])

    async def get_flow(
        self, job_id: str, queue_name: str, depth: int = 10, max_children: int = 0
    ) -> JobNode | None:
        """The tree under job `job_id` of `queue_name`, `depth` levels deep (0 = all),
        at most `max_children` children per node (0 = all)."""
        check_int("depth", depth)
        check_int("max_children", max_children)
        backend = await self._open()
        tree = await backend.get_flow(
            check_queue_name(queue_name, self.allow_empty_name), str(job_id), depth, max_children
        )
        return None if tree is None else _from_tree(backend, tree)


def _from_tree(backend: BackendAdapter, tree: Mapping[str, Any]) -> JobNode:
    record: JobRecord = tree["job"]
    job = Job(QueueRef(record.queue, backend), record)
    return JobNode(job, [_from_tree(backend, child) for child in tree["children"]])


def _node(spec: Any, path: Any, ancestors: set[int], allow_empty: bool = False) -> FlowNode:
    """Validate one node of a flow (and its subtree) before anything is written. `path` is a
    string or a zero-argument function giving one (built only for an error message);
    `ancestors` holds the ids of the nodes above (a node among them is a cycle)."""
    if not isinstance(spec, Mapping):
        raise InvalidOptionsError(f"{_text(path)} must be a mapping, got {spec!r}")
    if id(spec) in ancestors:
        raise InvalidOptionsError(f"{_text(path)} appears twice in its own flow (a cycle)")
    if not _NODE_KEYS.issuperset(spec):
        unknown = sorted(set(spec) - _NODE_KEYS)
        raise InvalidOptionsError(f"{_text(path)} has unknown keys {unknown}")
    queue = spec.get("queue_name", spec.get("queueName"))
    if queue is None:
        raise InvalidOptionsError(f"{_text(path)} needs a queue_name")
    check_queue_name(queue, allow_empty)
    name = spec.get("name")
    if not isinstance(name, str):
        raise InvalidOptionsError(f"{_text(path)} needs a string name, got {name!r}")
    new = gate.new_job(name, spec.get("data"), spec.get("opts"))
    children = spec.get("children") or ()
    if not isinstance(children, Sequence) or isinstance(children, str):
        raise InvalidOptionsError(f"{_text(path)}.children must be a list, got {children!r}")
    nodes: list[FlowNode] = []
    if children:
        ancestors.add(id(spec))
        for i, child in enumerate(children):
            nodes.append(_node(child, _child_path(path, i), ancestors, allow_empty))
        ancestors.discard(id(spec))
    return FlowNode(queue, new, nodes)


def _text(path: Any) -> str:
    return path if isinstance(path, str) else str(path())


def _child_path(path: Any, index: int) -> Any:
    return lambda: f"{_text(path)}.children[{index}]"
