"""The contract's Flows group (part of `BackendAdapter`, psyq/backends/base.py)."""

from __future__ import annotations

from collections.abc import Sequence

from psyq.backends.contract.root import AdapterRoot
from psyq.backends.contract.shapes import (
    Dependencies,
    FlowTree,
)
from psyq.backends.records import (
    FlowNode,
    JobRecord,
)

__all__ = ["Flows"]


class Flows(AdapterRoot):
    """Job trees: parents waiting for their children (BullMQ's flows)."""

    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """Add job trees atomically; returns every record in pre-order (a node, then its
        children's subtrees in order), so callers can rebuild the tree."""
        raise self._unsupported("flows")

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> FlowTree | None:
        """The job and its children's trees down to `depth` levels (0 = all), at most
        `max_children` children a level (0 = all); None when the job is missing."""
        raise self._unsupported("flows")

    async def move_to_waiting_children(self, queue: str, job_id: str, token: str) -> bool:
        raise self._unsupported("flows")

    async def get_dependencies(self, queue: str, job_id: str) -> Dependencies:
        raise self._unsupported("flows")

    async def get_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        raise self._unsupported("flows")

    async def get_failed_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        raise self._unsupported("flows")
