"""`FlowProducer(opts)`: the `bullmq` package's flows (trees of jobs across queues, added
atomically) over psyq's core FlowProducer. A tree comes back as `{"job": Job,
"children": [...]}`."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from psyq.compat.bullmq._core import CoreFlowProducer
from psyq.compat.bullmq.backend import Backend, redis_keys
from psyq.compat.bullmq.job import Job
from psyq.core.events import EventEmitter
from psyq.core.flow import JobNode
from psyq.core.options import merge_job_options, normalize_job_options
from psyq.errors import JobNotFoundError
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["FlowProducer", "create_backend"]

PARENT_MISSING = -5


def create_backend(name: str, opts: Mapping[str, Any] | None = None) -> Backend:
    """The store a FlowProducer writes to (`bullmq`'s one kind of backend)."""
    return Backend(name, opts or {})


class FlowProducer(EventEmitter):
    """Adds flows, with the `bullmq` package's names. `FlowProducer(opts)` or
    `FlowProducer(connection, opts)`."""

    def __init__(self, redisOpts: Any = None, opts: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if (
            opts is None
            and isinstance(redisOpts, Mapping)
            and ({"prefix", "connection", "backend"} & set(redisOpts))
        ):
            opts, redisOpts = redisOpts, None
        self.opts: dict[str, Any] = dict(opts or {})
        if redisOpts:
            self.opts["connection"] = redisOpts
        self.prefix = self.opts.get("prefix", DEFAULT_PREFIX)
        self.backend = create_backend("__default__", self.opts)
        self.closing = False

    async def add(
        self, flow: Mapping[str, Any], opts: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Add one tree atomically; None once the producer is closing."""
        if self.closing:
            return None
        queues_options = (opts or {}).get("queuesOptions")
        spec, tree = self._prepare(flow, queues_options)
        has_parent = bool((flow.get("opts") or {}).get("parent"))
        if has_parent and not await self.backend.parent_exists(flow):
            raise _flow_error(flow)
        try:
            nodes = await self.backend.addFlow([spec])
        except JobNotFoundError:
            raise _flow_error(flow) from None
        self._settle(tree, nodes)
        return tree

    async def addBulk(self, flows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        """Add several trees atomically. As in `bullmq`, a tree whose parent is missing
        does not fail the others: it comes back without an id."""
        if self.closing:
            return None
        prepared = [self._prepare(flow, None) for flow in flows]
        try:
            nodes = await self.backend.addFlow([spec for spec, _ in prepared])
        except JobNotFoundError:
            return [await self._add_alone(spec, tree) for spec, tree in prepared]
        self._settle([tree for _, tree in prepared], nodes)
        return [tree for _, tree in prepared]

    async def _add_alone(self, spec: dict[str, Any], tree: dict[str, Any]) -> dict[str, Any]:
        with contextlib.suppress(JobNotFoundError):
            self._settle(tree, await self.backend.addFlow([spec]))
        return tree

    # ------------------------------------------------------------------ trees
    def _prepare(
        self, flow: Mapping[str, Any], queues_options: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The core spec of one tree (queue defaults merged into each node's opts, the
        caller's dicts left as they are) and its result tree of not-yet-added Jobs."""
        queue_name = flow.get("queueName", flow.get("queue_name"))
        prefix = flow.get("prefix") or self.prefix
        defaults = ((queues_options or {}).get(queue_name) or {}).get("defaultJobOptions")
        opts = merge_job_options(
            normalize_job_options(copy.deepcopy(defaults)),
            normalize_job_options(copy.deepcopy(dict(flow.get("opts") or {}))),
        )
        pairs = [self._prepare(child, queues_options) for child in flow.get("children") or ()]
        spec = {
            "name": flow.get("name"),
            "queueName": queue_name,
            "data": flow.get("data"),
            "opts": opts,
            "children": [child for child, _ in pairs],
        }
        view = self.backend.forQueue(queue_name, prefix)
        job = Job(view, str(flow.get("name")), flow.get("data"), opts)
        tree: dict[str, Any] = {"job": job}
        if pairs:
            tree["children"] = [child_tree for _, child_tree in pairs]
        return spec, tree

    def _settle(self, trees: Any, nodes: Any) -> None:
        """Give the trees' Jobs the stored jobs the core returned."""
        if not isinstance(nodes, list):
            return
        for tree, node in zip(trees if isinstance(trees, list) else [trees], nodes, strict=False):
            for job, core in _pairs(tree, node):
                job._core = core
                job.sync()

    async def close(self) -> None:
        self.closing = True
        await self.backend.close()

    async def disconnect(self) -> None:
        await self.close()

    # ------------------------------------------------------------------ Node BullMQ's own
    # (calls of Node BullMQ 6 that the Python package lacks: psyq.compat.bullmq.node_surface)
    @property
    def keys(self) -> dict[str, str]:
        """Redis's key names with no queue (Node: `toKey(queue, type)` names a queue's)."""
        return redis_keys(str(self.prefix), "")

    def toKey(self, name: str, type: str) -> str:
        return f"{self.prefix}:{name}:{type}"

    def getBackend(self) -> Backend:
        return self.backend

    async def waitUntilReady(self) -> None:
        await self.backend.open()

    async def getFlow(self, opts: Mapping[str, Any]) -> dict[str, Any] | None:
        """The tree under job `opts["id"]` of queue `opts["queueName"]`: `{"job": Job,
        "children": [...]}` (`children` left out of a node without), `depth` levels deep
        (default 10; 1 is the job alone), at most `maxChildren` children a node (default
        20), as Node; None when the job does not exist or the producer is closing."""
        for key in ("id", "queueName"):
            if not opts.get(key):
                raise ValueError(f"getFlow needs opts[{key!r}], got {opts.get(key)!r}")
        if self.closing:
            return None
        producer = CoreFlowProducer(await self.backend.adapter(), prefix=self.prefix)
        node = await producer.get_flow(
            str(opts["id"]),
            str(opts["queueName"]),
            depth=int(opts.get("depth", 10)),
            max_children=int(opts.get("maxChildren", 20)),
        )
        prefix = str(opts.get("prefix") or self.prefix)
        return None if node is None else self._tree_of(node, prefix)

    def _tree_of(self, node: JobNode, prefix: str) -> dict[str, Any]:
        view = self.backend.forQueue(node.job.queue_name, prefix)
        tree: dict[str, Any] = {"job": Job.wrap(view, node.job)}
        if node.children:
            tree["children"] = [self._tree_of(child, prefix) for child in node.children]
        return tree


def _pairs(tree: Mapping[str, Any], node: Any) -> Iterator[tuple[Job, Any]]:
    if not isinstance(node, JobNode):
        return
    yield tree["job"], node.job
    for child_tree, child in zip(tree.get("children") or (), node.children, strict=False):
        yield from _pairs(child_tree, child)


def _flow_error(flow: Mapping[str, Any]) -> Exception:
    parent = (flow.get("opts") or {}).get("parent") or {}
    key = f"{parent.get('queue')}:{parent.get('id')}"
    error = Exception(f"Missing key for parent job {key}. addJob")
    error.code = PARENT_MISSING  # type: ignore[attr-defined]
    return error
