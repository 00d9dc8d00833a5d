"""Flows: adding job trees in one statement (the layout's add_flow), and reading them
back: the tree, a parent's dependencies, its children's values."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from psyq.backends.base import Dependencies, FlowNode, FlowTree, JobRecord, raise_for_code
from psyq.backends.postgres.adding import Adding, new_record, refuse
from psyq.backends.postgres.connection import LayoutCode
from psyq.backends.postgres.locks import entry_locks
from psyq.backends.postgres.statements import Statements

__all__ = ["Flows"]


class Flows(Adding):
    """Flow adds and reads."""

    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        return await self._add_flow(roots, self)

    async def add_flow_in(self, transaction: object, roots: Sequence[FlowNode]) -> list[JobRecord]:
        """As add_flow, on the application's transaction (transaction.py)."""
        async with self._in_transaction(transaction) as on:
            return await self._add_flow(roots, on)

    async def _add_flow(self, roots: Sequence[FlowNode], on: Statements) -> list[JobRecord]:
        """Every node of every tree in pre-order, each entry naming its parent; a node with
        children gets an id here (as Node's FlowProducer gives one) so they can name it."""
        entries: list[dict[str, Any]] = []
        nodes: list[FlowNode] = []

        def visit(node: FlowNode, parent: dict[str, Any] | None) -> None:
            entry = self._entry(node.queue, node.job)
            if node.children and not entry["id"]:
                entry["id"] = str(uuid.uuid4())
            if node.children:
                entry["addToWaitingChildren"] = True
            if parent is not None:
                entry["parentQueue"] = parent["queue"]
                entry["parentId"] = parent["id"]
                entry["parentKey"] = f"{parent['queue']}:{parent['id']}"
            entries.append(entry)
            nodes.append(node)
            for child in node.children:
                visit(child, entry)

        for root in roots:
            visit(root, None)
        try:
            locks = entry_locks(entries)
            rows = await on._rows_in_order(locks, "adding.flow", json.dumps(entries))
        except LayoutCode as exc:
            raise_for_code(exc.code, entries[0]["queue"], entries[0]["id"], "add flow")
            raise
        for queue in {entry["queue"] for entry in entries}:
            self._made_waiting(queue)
        ids = [str(row["id"]) for row in rows]
        for entry, job_id in zip(entries, ids, strict=True):
            refuse(entry, job_id)
        found = await on._rows("flows.records", [e["queue"] for e in entries], ids)
        by_key = {(row["queue"], row["id"]): row for row in found}
        now = int(rows[0]["now"]) if rows else 0
        # a job gone by the read (an existing id the add attached, finished and trimmed
        # by retention meanwhile) is given as the add saw it
        return [
            self._records(node.queue, [by_key[entry["queue"], job_id]])[0]
            if (entry["queue"], job_id) in by_key
            else new_record(node.queue, job_id, node.job, now)
            for node, entry, job_id in zip(nodes, entries, ids, strict=True)
        ]

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> FlowTree | None:
        record = await self.get_job(queue, job_id)
        if record is None:
            return None
        children: list[FlowTree] = []
        if depth != 1:
            rows = await self._rows("flows.children", queue, job_id)
            for row in rows[: max_children or None]:
                child = await self.get_flow(
                    row["child_queue"], row["child_id"], max(0, depth - 1), max_children
                )
                if child is not None:
                    children.append(child)
        return {"job": record, "children": children}

    async def move_to_waiting_children(self, queue: str, job_id: str, token: str) -> bool:
        rows = await self._settle(
            "flows.wait_children", queue, job_id, "wait for children of", queue, job_id, token
        )
        return bool(rows and rows[0][0] == 1)

    async def _children(self, queue: str, job_id: str) -> list[Any]:
        return await self._rows("flows.children", queue, job_id)

    async def get_dependencies(self, queue: str, job_id: str) -> Dependencies:
        deps: Dependencies = {"processed": {}, "unprocessed": [], "failed": {}, "ignored": {}}
        for row in await self._children(queue, job_id):
            key = row["child_key"]
            if row["status"] == "pending":
                deps["unprocessed"].append(key)
            elif row["status"] == "processed":
                deps["processed"][key] = row["value"] or "null"
            else:
                failures = deps["failed"] if _failure_kind(row) == "failed" else deps["ignored"]
                failures[key] = _reason(row["value"])
        deps["unprocessed"].sort()
        return deps

    async def get_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        return {
            row["child_key"]: row["value"] or "null"
            for row in await self._children(queue, job_id)
            if row["status"] == "processed"
        }

    async def get_failed_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        return {
            row["child_key"]: _reason(row["value"])
            for row in await self._children(queue, job_id)
            if row["status"] in ("failed", "ignored") and _failure_kind(row) == "failed"
        }


def _failure_kind(row: Any) -> str:
    """`failed` or `ignored`, as psyq's other backends file a failed child: the layout files
    a continueParentOnFailure child as ignored (and Node lists it so); psyq, as BullMQ's
    Redis layout, counts it among the failed children its parent goes on without."""
    return "failed" if row["status"] == "failed" or row["continued"] else "ignored"


def _reason(value: str | None) -> str:
    """A failed or ignored child's reason (stored as a JSON string)."""
    if value is None:
        return ""
    reason = json.loads(value)
    return reason if isinstance(reason, str) else value
