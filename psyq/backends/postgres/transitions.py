"""State transitions on a `Tx`: the steps a BackendAdapter method runs in one transaction.

Each function here reads and writes through named statements (see sql/), records the events
the transition emits, and never commits: the backend does, once per transition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import asyncpg

from psyq.backends.base import (
    Completed,
    Failed,
    FetchRequest,
    FlowNode,
    JobRecord,
    NewJob,
    Retry,
    StalledResult,
)
from psyq.backends.postgres.records import opts_of, to_record
from psyq.backends.postgres.tx import Tx, json_text, queue_of
from psyq.core.options import keep_jobs
from psyq.core.schedule import first_run, next_run
from psyq.errors import JobNotFoundError, JobStateError, LockError, PsyqError

__all__ = ["STALLED_REASON"]

STALLED_REASON = "job stalled more than allowable limit"
SKIP_LOCK_TOKEN = "0"
READY = ("waiting", "prioritized")
POLICIES = (
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
    "removeDependencyOnFailure",
)


def split_key(job_key: str) -> tuple[str, str]:
    """(qkey, id) of a job key "<prefix>:<queue>:<id>"."""
    prefix, queue, job_id = job_key.split(":", 2)
    return f"{prefix}:{queue}", job_id


# ---------------------------------------------------------------------- adding
@dataclass
class _Plan:
    index: int
    new: NewJob
    job_id: str | None
    dedup: dict[str, Any] | None = None
    parent: dict[str, Any] | None = None


@dataclass
class _Batch:
    results: list[JobRecord | None]
    plans: list[_Plan] = field(default_factory=list)
    same_as: dict[int, int] = field(default_factory=dict)  # index -> index of its twin
    planned: dict[str, int] = field(default_factory=dict)  # custom id -> index


async def add_jobs(
    tx: Tx, qkey: str, jobs: Sequence[NewJob], hold: bool = False
) -> list[JobRecord]:
    """Add `jobs` to `qkey` (all in this transaction); `hold`: they wait for children."""
    now = await tx.now()
    batch = _Batch([None] * len(jobs))
    customs = [str(new.opts["jobId"]) for new in jobs if new.opts and "jobId" in new.opts]
    stored = {}
    if customs:
        stored = {row["id"]: row for row in await tx.fetch("add_jobs.existing", qkey, customs)}
    for index, new in enumerate(jobs):
        await _plan(tx, qkey, batch, index, new, stored, now)
    rows = await _insert(tx, qkey, batch.plans, hold, now)
    for plan in batch.plans:
        batch.results[plan.index] = rows[plan.index]
    for index, twin in batch.same_as.items():
        batch.results[index] = batch.results[twin]
    return [record for record in batch.results if record is not None]


async def _plan(
    tx: Tx,
    qkey: str,
    batch: _Batch,
    index: int,
    new: NewJob,
    stored: dict[str, asyncpg.Record],
    now: int,
) -> None:
    opts = new.opts
    custom = str(opts["jobId"]) if opts and "jobId" in opts else None
    if custom is not None and custom in stored:
        tx.emit(qkey, "duplicated", custom)
        batch.results[index] = to_record(stored[custom])
        return
    if custom is not None and custom in batch.planned:
        batch.same_as[index] = batch.planned[custom]
        return
    dedup = opts.get("deduplication") if opts else None
    if dedup is not None:
        existing = await _deduplicated(tx, qkey, dedup, now, custom)
        if existing is not None:
            batch.results[index] = existing
            return
    parent = opts.get("parent") if opts else None
    if parent is not None:
        await _check_parent(tx, parent)
    if custom is not None:
        batch.planned[custom] = index
    batch.plans.append(_Plan(index, new, custom, dedup, parent))


_NOT_PLAIN = ("jobId", "deduplication", "parent")


def is_plain(new: NewJob) -> bool:
    """A job add_jobs.insert_plain can add: no custom id, dedup key or parent."""
    opts = new.opts
    return not opts or not any(name in opts for name in _NOT_PLAIN)


def plain_columns(jobs: Sequence[NewJob]) -> list[list[Any]]:
    """The arrays of add_jobs.insert_plain: names, data, opts, timestamps, delays,
    priorities, lifo flags."""
    columns: list[list[Any]] = [[] for _ in range(7)]
    for new in jobs:
        opts = new.opts or {}
        values = (
            new.name,
            new.data,
            json_text(opts) if opts else "{}",
            new.timestamp,
            int(opts.get("delay", 0)),
            int(opts.get("priority", 0)),
            bool(opts.get("lifo", False)),
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return columns


def plain_record(queue: str, job_id: str, new: NewJob, now: int) -> JobRecord:
    """The record add_jobs.insert_plain wrote for `new` (the same columns it stores)."""
    opts = new.opts or {}
    delay = int(opts.get("delay", 0))
    priority = int(opts.get("priority", 0))
    state = "delayed" if delay > 0 else "prioritized" if priority > 0 else "waiting"
    timestamp = now if new.timestamp is None else new.timestamp
    return JobRecord(
        id=job_id,
        queue=queue,
        name=new.name,
        data=new.data,
        opts=json.loads(json_text(opts)) if opts else {},
        timestamp=timestamp,
        delay=delay,
        priority=priority,
        state=state,
    )


async def _check_parent(tx: Tx, parent: dict[str, Any]) -> None:
    """A child needs its parent (locked, so the parent cannot move meanwhile)."""
    if await tx.fetchrow("common.lock_job", parent["queue"], parent["id"]) is None:
        raise JobNotFoundError(parent["queue"], parent["id"])


async def _deduplicated(
    tx: Tx, qkey: str, dedup: dict[str, Any], now: int, custom: str | None
) -> JobRecord | None:
    """The job that makes this add a duplicate, or None (the add goes ahead)."""
    entry = await tx.fetchrow("add_jobs.dedup_entry", qkey, dedup["id"])
    if entry is None:
        return None
    row = await tx.fetchrow("common.lock_job", qkey, entry["job_id"])
    expires = entry["expires"]
    if row is None or (expires is not None and expires <= now):
        await tx.execute("add_jobs.dedup_delete", qkey, dedup["id"])
        return None
    if dedup.get("replace") and row["state"] == "delayed":
        await tx.fetch("common.drop_jobs", qkey, [row["id"]])
        tx.emit(qkey, "removed", row["id"], {"prev": "delayed"})
        return None
    if dedup.get("extend") and expires is not None:
        await tx.execute("add_jobs.dedup_set", qkey, dedup["id"], row["id"], now + dedup["ttl"])
    fields = {"deduplicationId": dedup["id"], "deduplicatedJobId": custom or ""}
    tx.emit(qkey, "deduplicated", row["id"], fields)
    return to_record(row)


async def _assign_ids(tx: Tx, qkey: str, plans: list[_Plan]) -> list[str]:
    autos = sum(1 for plan in plans if plan.job_id is None)
    if autos:
        last = int(await tx.fetchval("add_jobs.take_ids", qkey, queue_of(qkey), autos))
    else:
        await tx.execute("common.ensure_queue", qkey, queue_of(qkey))
        last = 0
    next_auto = iter(range(last - autos + 1, last + 1))
    return [plan.job_id or str(next(next_auto)) for plan in plans]


async def _insert(
    tx: Tx, qkey: str, plans: list[_Plan], hold: bool, now: int
) -> dict[int, JobRecord]:
    if not plans:
        return {}
    ids = await _assign_ids(tx, qkey, plans)
    seqs = [row[0] for row in await tx.fetch("add_jobs.next_seqs", len(plans))]
    columns: list[list[Any]] = [[] for _ in range(11)]
    for plan, job_id, seq in zip(plans, ids, seqs, strict=True):
        for column, value in zip(columns, _row(plan, job_id, seq, hold, now), strict=True):
            column.append(value)
    rows = {row["id"]: row for row in await tx.fetch("add_jobs.insert", qkey, *columns)}
    result: dict[int, JobRecord] = {}
    for plan, job_id in zip(plans, ids, strict=True):
        row = rows[job_id]
        await _after_insert(tx, qkey, plan, row, now)
        result[plan.index] = to_record(row)
    return result


def _row(plan: _Plan, job_id: str, seq: int, hold: bool, now: int) -> list[Any]:
    new, opts = plan.new, plan.new.opts or {}
    timestamp = now if new.timestamp is None else new.timestamp
    delay = int(opts.get("delay", 0))
    priority = int(opts.get("priority", 0))
    due = None
    if hold:
        state = "waiting-children"
    elif delay > 0:
        state, due = "delayed", timestamp + delay
    else:
        state = "prioritized" if priority > 0 else "waiting"
        seq = -seq if opts.get("lifo") else seq
    parent = plan.parent
    parent_key = None if parent is None else f"{parent['queue']}:{parent['id']}"
    opts_text = json_text(opts)
    head = [job_id, new.name, new.data, opts_text, timestamp, delay, priority, parent_key]
    return [*head, state, seq, due]


async def _after_insert(tx: Tx, qkey: str, plan: _Plan, row: asyncpg.Record, now: int) -> None:
    job_id = row["id"]
    _emit_added(tx, qkey, job_id, row["name"], row["state"], row["due"])
    if plan.dedup is not None:
        ttl = plan.dedup.get("ttl")
        expires = None if ttl is None else now + ttl
        await tx.execute("add_jobs.dedup_set", qkey, plan.dedup["id"], job_id, expires)
    if plan.parent is not None:
        parent = plan.parent
        await tx.execute("add_jobs.link_child", parent["queue"], parent["id"], f"{qkey}:{job_id}")


def _emit_added(tx: Tx, qkey: str, job_id: str, name: str, state: str, due: int | None) -> None:
    """The events of a job just written: added, then its state (and a wake-up if ready)."""
    tx.emit(qkey, "added", job_id, {"name": name})
    if state == "delayed":
        tx.emit(qkey, "delayed", job_id, {"delay": due})
    elif state == "waiting-children":
        tx.emit(qkey, "waiting-children", job_id)
    else:
        tx.emit(qkey, "waiting", job_id)
        tx.wake(qkey)


# ---------------------------------------------------------------------- adding flows
@dataclass
class _Node:
    """One node of a flow being added, in pre-order (a node, then its children's subtrees).
    It ends up written (`job_id`), a duplicate of a stored job (`stored`), or a duplicate
    of an earlier node of the flow (`twin`, that node's index)."""

    qkey: str
    new: NewJob
    parent: int | None  # index of its parent node; None for a root
    hold: bool  # it has children: it waits for them
    custom: str | None
    job_id: str | None = None
    stored: asyncpg.Record | None = None
    twin: int | None = None


def flow_has_dedup(roots: Sequence[FlowNode]) -> bool:
    """Whether a node of these trees asks for deduplication (add_flow cannot batch it)."""
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node.job.opts and "deduplication" in node.job.opts:
            return True
        stack.extend(node.children)
    return False


async def add_flow(tx: Tx, roots: Sequence[FlowNode], key: Callable[[str], str]) -> list[JobRecord]:
    """Add job trees without deduplication, as adding their nodes one by one in pre-order
    would (the same ids, rows, links, events and records), in a few statements: every new
    row (with its events) by one INSERT, every link by another. `key` maps a queue name to
    its qkey."""
    nodes = _flatten(roots, key)
    now = await tx.now()
    stored = await _stored_customs(tx, nodes)
    autos = await _take_flow_ids(tx, nodes, stored)
    _resolve_ids(nodes, stored, autos)
    await _check_parents(tx, nodes)
    rows = await _new_rows(tx, nodes, now)
    await _write_rows(tx, nodes, rows)
    await _link_flow(tx, nodes)
    return _flow_records(nodes, rows)


def _flatten(roots: Sequence[FlowNode], key: Callable[[str], str]) -> list[_Node]:
    nodes: list[_Node] = []
    stack: list[tuple[FlowNode, int | None]] = [(root, None) for root in reversed(roots)]
    while stack:
        flow_node, parent = stack.pop()
        new = flow_node.job
        custom = str(new.opts["jobId"]) if new.opts and "jobId" in new.opts else None
        nodes.append(_Node(key(flow_node.queue), new, parent, bool(flow_node.children), custom))
        index = len(nodes) - 1
        stack.extend((child, index) for child in reversed(flow_node.children))
    return nodes


def _by_queue(nodes: Sequence[_Node]) -> dict[str, list[_Node]]:
    """The flow's nodes by qkey, queues in the order their first node comes (the order in
    which adding node by node locks their rows)."""
    found: dict[str, list[_Node]] = {}
    for node in nodes:
        found.setdefault(node.qkey, []).append(node)
    return found


async def _stored_customs(tx: Tx, nodes: Sequence[_Node]) -> dict[tuple[str, str], asyncpg.Record]:
    """The stored jobs that nodes' custom ids name, by (qkey, id)."""
    found: dict[tuple[str, str], asyncpg.Record] = {}
    for qkey, queued in _by_queue(nodes).items():
        customs = sorted({n.custom for n in queued if n.custom is not None})
        if customs:
            for row in await tx.fetch("add_jobs.existing", qkey, customs):
                found[qkey, row["id"]] = row
    return found


async def _take_flow_ids(
    tx: Tx, nodes: Sequence[_Node], stored: dict[tuple[str, str], asyncpg.Record]
) -> dict[str, Iterator[str]]:
    """Take each queue's auto ids (its row stays locked to the commit) and make sure the
    queue row of every queue that gets a job exists; auto ids by qkey, in order."""
    autos: dict[str, Iterator[str]] = {}
    for qkey, queued in _by_queue(nodes).items():
        count = sum(1 for n in queued if n.custom is None)
        if count:
            last = int(await tx.fetchval("add_jobs.take_ids", qkey, queue_of(qkey), count))
            autos[qkey] = iter([str(i) for i in range(last - count + 1, last + 1)])
        elif any((qkey, n.custom) not in stored for n in queued):
            await tx.execute("common.ensure_queue", qkey, queue_of(qkey))
    return autos


def _resolve_ids(
    nodes: list[_Node],
    stored: dict[tuple[str, str], asyncpg.Record],
    autos: dict[str, Iterator[str]],
) -> None:
    """Give each node, in pre-order, its id or the job it duplicates, and its parent link."""
    planned: dict[tuple[str, str], int] = {}
    for index, node in enumerate(nodes):
        if node.parent is not None:
            parent = nodes[node.parent]
            link = {"id": _id_of(nodes, node.parent), "queue": parent.qkey}
            new = node.new
            node.new = NewJob(new.name, new.data, {**new.opts, "parent": link}, new.timestamp)
        if node.custom is not None and (node.qkey, node.custom) in stored:
            node.stored = stored[node.qkey, node.custom]
        elif node.custom is not None and (node.qkey, node.custom) in planned:
            node.twin = planned[node.qkey, node.custom]
        else:
            node.job_id = node.custom or next(autos[node.qkey])
            planned.setdefault((node.qkey, node.job_id), index)


def _id_of(nodes: Sequence[_Node], index: int) -> str:
    """The id of the job node `index` stands for (its own, or the one it duplicates)."""
    node = nodes[index]
    if node.stored is not None:
        return str(node.stored["id"])
    if node.twin is not None:
        return _id_of(nodes, node.twin)
    assert node.job_id is not None
    return node.job_id


async def _check_parents(tx: Tx, nodes: Sequence[_Node]) -> None:
    """Each new node's parent must be there when its turn comes in pre-order: a node this
    flow writes before it, else a stored job (locked, as when adding one by one)."""
    written = {(n.qkey, n.job_id): i for i, n in enumerate(nodes) if n.job_id is not None}
    outside: dict[tuple[str, str], dict[str, Any]] = {}
    for index, node in enumerate(nodes):
        parent = node.new.opts.get("parent") if node.new.opts else None
        if node.job_id is None or parent is None:
            continue
        target = (parent["queue"], parent["id"])
        if target not in written:
            outside.setdefault(target, parent)
        elif written[target] > index:
            raise JobNotFoundError(parent["queue"], parent["id"])
    for parent in outside.values():
        await _check_parent(tx, parent)


async def _new_rows(tx: Tx, nodes: Sequence[_Node], now: int) -> dict[tuple[str, str], Row]:
    """The rows of the flow's new jobs, in pre-order, by (qkey, id)."""
    written = [node for node in nodes if node.job_id is not None]
    if not written:
        return {}
    seqs = [row[0] for row in await tx.fetch("add_jobs.next_seqs", len(written))]
    rows: dict[tuple[str, str], Row] = {}
    for index, (node, seq) in enumerate(zip(written, seqs, strict=True)):
        assert node.job_id is not None
        plan = _Plan(index, node.new, node.job_id, parent=node.new.opts.get("parent"))
        rows[node.qkey, node.job_id] = Row(node.qkey, *_row(plan, node.job_id, seq, node.hold, now))
    return rows


def _columns(rows: dict[tuple[str, str], Row]) -> list[list[Any]]:
    """The arrays of flows.insert: one per column, one element per row."""
    return [list(column) for column in zip(*rows.values(), strict=True)]


async def _write_rows(tx: Tx, nodes: Sequence[_Node], rows: dict[tuple[str, str], Row]) -> None:
    """Insert the new jobs, and record every node's events."""
    if rows and len(rows) == len(nodes):
        await _insert_with_events(tx, rows)
        return
    if rows:  # some nodes are duplicates: their events come between the new jobs' ones
        await tx.execute("flows.insert", *_columns(rows))
    _emit_flow_events(tx, nodes, rows)


async def _insert_with_events(tx: Tx, rows: dict[tuple[str, str], Row]) -> None:
    """Insert the new jobs with their events (no node is a duplicate), and wake workers."""
    found = await tx.fetch("flows.insert_with_events", *_columns(rows), tx.channel)
    for queue in found:
        tx.note_events(queue["qkey"], queue["last_event"], queue["span"])
    for row in rows.values():
        if row.state not in ("delayed", "waiting-children"):
            tx.wake(row.qkey)


def _emit_flow_events(tx: Tx, nodes: Sequence[_Node], rows: dict[tuple[str, str], Row]) -> None:
    """Each node's events in pre-order: a new job's, or `duplicated`."""
    for node in nodes:
        if node.job_id is None:
            tx.emit(node.qkey, "duplicated", node.custom)
            continue
        row = rows[node.qkey, node.job_id]
        _emit_added(tx, node.qkey, row.id, row.name, row.state, row.due)


class Row(NamedTuple):
    """The columns add_flow writes for a new job (the others keep their defaults)."""

    qkey: str
    id: str
    name: str
    data: str
    opts: str  # JSON text
    timestamp: int
    delay: int
    priority: int
    parent_key: str | None
    state: str
    seq: int
    due: int | None

    def record(self) -> JobRecord:
        """The record to_record would read back from this row."""
        return JobRecord(
            id=self.id,
            queue=queue_of(self.qkey),
            name=self.name,
            data=self.data,
            opts=json.loads(self.opts),
            timestamp=self.timestamp,
            delay=self.delay,
            priority=self.priority,
            stacktrace=[],
            parent_key=self.parent_key,
            state=self.state,
        )


async def _link_flow(tx: Tx, nodes: Sequence[_Node]) -> None:
    """One deps row per new node that has a parent."""
    parents: tuple[list[str], list[str], list[str]] = ([], [], [])
    for node in nodes:
        parent = node.new.opts.get("parent") if node.new.opts else None
        if node.job_id is not None and parent is not None:
            parents[0].append(parent["queue"])
            parents[1].append(parent["id"])
            parents[2].append(f"{node.qkey}:{node.job_id}")
    if parents[0]:
        await tx.execute("flows.link_children", *parents)


def _flow_records(nodes: Sequence[_Node], rows: dict[tuple[str, str], Row]) -> list[JobRecord]:
    """Every node's record, in pre-order."""
    records: list[JobRecord] = []
    for index, node in enumerate(nodes):
        if node.stored is not None:
            records.append(to_record(node.stored))
        else:
            records.append(rows[node.qkey, _id_of(nodes, index)].record())
    return records


# ---------------------------------------------------------------------- placing
async def enqueue(tx: Tx, qkey: str, job_id: str, front: bool, prev: str) -> asyncpg.Record:
    """Make a detached job ready (waiting or prioritized), and say so."""
    row = await tx.fetchrow("common.enqueue", qkey, job_id, front)
    assert row is not None
    tx.emit(qkey, "waiting", job_id, {"prev": prev})
    tx.wake(qkey)
    return row


async def delay(tx: Tx, qkey: str, job_id: str, due: int, delay_ms: int) -> None:
    await tx.fetchrow("common.delay", qkey, job_id, due, delay_ms)
    tx.emit(qkey, "delayed", job_id, {"delay": due})
    tx.wake(qkey)  # a waiter may be waiting for a later due time


def is_lifo(row: asyncpg.Record) -> bool:
    return bool(opts_of(row).get("lifo", False))


async def locked(
    tx: Tx, qkey: str, job_id: str, token: str | None, operation: str
) -> asyncpg.Record:
    """The active job `job_id` held with `token`, locked; raise when it is not."""
    row = await tx.fetchrow("common.lock_job", qkey, job_id)
    if row is None:
        raise JobNotFoundError(queue_of(qkey), job_id)
    if row["state"] != "active":
        raise LockError(job_id, operation, f"it is not active (it is {row['state']})")
    if token is not None and token != SKIP_LOCK_TOKEN and row["lock_token"] != token:
        raise LockError(job_id, operation, "the lock is held by another token")
    return row


async def job_in_state(
    tx: Tx, qkey: str, job_id: str, states: Sequence[str], operation: str
) -> asyncpg.Record:
    row = await tx.fetchrow("common.lock_job", qkey, job_id)
    if row is None:
        raise JobNotFoundError(queue_of(qkey), job_id)
    if row["state"] not in states:
        raise JobStateError(job_id, f"{row['state']}, not {' or '.join(states)}", operation)
    return row


# ---------------------------------------------------------------------- fetching
async def move_to_active(tx: Tx, qkey: str, request: FetchRequest) -> list[JobRecord]:
    queue = await tx.fetchrow("move_to_active.promote_and_queue", qkey)
    assert queue is not None
    for job_id in queue["promoted"]:
        tx.emit(qkey, "waiting", job_id, {"prev": "delayed"})
        tx.wake(qkey)
    if queue["qkey"] is None or queue["paused"]:
        return []
    tx.know_now(queue["now"])
    wanted = len(request.tokens)
    limiter = _limiter(queue, request)
    if (
        limiter is not None
        or queue["global_concurrency"] is not None
        or (queue["limited_until"] > queue["now"])
    ):
        queue = await tx.fetchrow("move_to_active.queue_locked", qkey)
        assert queue is not None
        wanted = await _allowed(tx, qkey, queue, wanted, limiter)
    rows = await _take(tx, qkey, queue, request, wanted) if wanted > 0 else []
    if limiter is not None and rows:
        await _count_window(tx, qkey, queue, limiter, len(rows))
    await _drained(tx, qkey, queue, bool(rows))
    for row in rows:
        if "repeatJobKey" in opts_of(row):
            await create_next(tx, qkey, row)
    return [to_record(row) for row in rows]


def _limiter(queue: asyncpg.Record, request: FetchRequest) -> tuple[int, int] | None:
    if queue["global_max"] is not None:
        return queue["global_max"], queue["global_duration"]
    if request.limiter is not None:
        return request.limiter.max, request.limiter.duration
    return None


async def _allowed(
    tx: Tx, qkey: str, queue: asyncpg.Record, wanted: int, limiter: tuple[int, int] | None
) -> int:
    now = queue["now"]
    if queue["limited_until"] > now:
        return 0
    if queue["global_concurrency"] is not None:
        active = int(await tx.fetchval("move_to_active.active_count", qkey))
        wanted = min(wanted, queue["global_concurrency"] - active)
    if limiter is None:
        return wanted
    most, duration = limiter
    start, count = _window(queue, duration)
    left = most - count
    if left <= 0:
        await tx.execute("move_to_active.count_window", qkey, start, count, start + duration)
        return 0
    return min(wanted, left)


def _window(queue: asyncpg.Record, duration: int) -> tuple[int, int]:
    now = queue["now"]
    if now >= queue["window_start"] + duration:
        return now, 0
    return queue["window_start"], queue["window_count"]


async def _count_window(
    tx: Tx, qkey: str, queue: asyncpg.Record, limiter: tuple[int, int], taken: int
) -> None:
    start, count = _window(queue, limiter[1])
    await tx.execute(
        "move_to_active.count_window", qkey, start, count + taken, queue["limited_until"]
    )


async def _take(
    tx: Tx, qkey: str, queue: asyncpg.Record, request: FetchRequest, wanted: int
) -> list[asyncpg.Record]:
    tokens = list(request.tokens[:wanted])
    rows = await tx.fetch(
        "move_to_active.take",
        qkey,
        tokens,
        request.lock_duration,
        request.worker_name,
        wanted,
        tx.channel,
        bool(queue["drained"]),
    )
    if rows:
        tx.note_events(qkey, rows[0]["last_event"], len(rows))
    return sorted(rows, key=lambda row: row["rn"])


async def _drained(tx: Tx, qkey: str, queue: asyncpg.Record, took: bool) -> None:
    """The queue found empty becomes drained, with its event (a take clears the flag
    itself). Events this transaction recorded so far are written first, keeping order."""
    if took or queue["drained"]:
        return
    await tx.flush()
    row = await tx.fetchrow("move_to_active.mark_drained", qkey, tx.channel)
    if row is not None:
        tx.note_events(qkey, row["last_event"], 1)


# ---------------------------------------------------------------------- settling
Outcome = Completed | Failed


async def finish_many(
    tx: Tx, qkey: str, items: Sequence[tuple[str, str, Outcome]]
) -> list[PsyqError | None]:
    """Complete / fail active jobs in one statement; one error (or None) per item."""
    columns: list[list[Any]] = [[] for _ in range(6)]
    for job_id, token, outcome in items:
        values = _finish_values(job_id, token, outcome)
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    rows = await tx.fetch("move_to_finished.finish", qkey, *columns, tx.channel)
    if rows:
        tx.note_events(qkey, rows[0]["last_event"], 2 * len(rows))
    done = {row["ord"] - 1: row for row in rows}
    errors = await _finish_errors(tx, qkey, items, done)
    for index in sorted(done):
        await finished(tx, qkey, done[index], counted=True)
    if rows and rows[0]["gc"] is not None:
        tx.wake(qkey)  # a slot of the queue's global concurrency is free
    return errors


def _finish_values(job_id: str, token: str, outcome: Outcome) -> list[Any]:
    if isinstance(outcome, Completed):
        return [job_id, token, "completed", outcome.returnvalue, None, None]
    return [job_id, token, "failed", None, outcome.reason, json_text(list(outcome.stacktrace))]


async def _finish_errors(
    tx: Tx, qkey: str, items: Sequence[tuple[str, str, Outcome]], done: dict[int, Any]
) -> list[PsyqError | None]:
    missed = [item[0] for index, item in enumerate(items) if index not in done]
    if not missed:
        return [None] * len(items)
    found = {row["id"]: row for row in await tx.fetch("move_to_finished.lock_states", qkey, missed)}
    errors: list[PsyqError | None] = []
    for index, (job_id, _, outcome) in enumerate(items):
        operation = "complete" if isinstance(outcome, Completed) else "fail"
        errors.append(None if index in done else _lock_error(qkey, job_id, operation, found))
    return errors


def _lock_error(
    qkey: str, job_id: str, operation: str, found: dict[str, asyncpg.Record]
) -> PsyqError:
    row = found.get(job_id)
    if row is None:
        return JobNotFoundError(queue_of(qkey), job_id)
    if row["state"] != "active":
        return LockError(job_id, operation, f"it is not active (it is {row['state']})")
    return LockError(job_id, operation, "the lock is held by another token")


async def finished(tx: Tx, qkey: str, row: asyncpg.Record, counted: bool = False) -> None:
    """After a job completed or failed for good: metrics and events (unless `counted`: the
    finish statement wrote them), dedup, retention, parent."""
    job_id, state, opts = row["id"], row["state"], opts_of(row)
    if not counted:
        await tx.execute("common.count_metric", qkey, state, 1)
        _emit_finished(tx, qkey, row, opts)
    if "deduplication" in opts:
        await tx.execute("common.release_dedup", qkey, job_id)
    keep = opts.get("removeOnComplete" if state == "completed" else "removeOnFail")
    if keep is not None and keep is not False:
        await _retain(tx, qkey, state, keep, job_id)
    if row["parent_key"] is not None:
        await child_finished(tx, row)


def _emit_finished(tx: Tx, qkey: str, row: asyncpg.Record, opts: dict[str, Any]) -> None:
    job_id = row["id"]
    if row["state"] == "completed":
        tx.emit(qkey, "completed", job_id, {"returnvalue": row["returnvalue"], "prev": "active"})
        return
    tx.emit(qkey, "failed", job_id, {"failedReason": row["failed_reason"], "prev": "active"})
    if row["attempts_made"] >= opts.get("attempts", 1):
        tx.emit(qkey, "retries-exhausted", job_id, {"attemptsMade": row["attempts_made"]})


async def _retain(tx: Tx, qkey: str, state: str, keep: Any, job_id: str) -> None:
    if keep is True:
        doomed = [job_id]
    elif isinstance(keep, int):
        doomed = [r["id"] for r in await tx.fetch("common.newest_beyond", qkey, state, keep)]
    else:
        policy = keep_jobs(keep)
        doomed = []
        if policy.count is not None:
            rows = await tx.fetch("common.newest_beyond", qkey, state, policy.count)
            doomed += [r["id"] for r in rows]
        if policy.age_ms is not None:
            cutoff = await tx.now() - policy.age_ms
            rows = await tx.fetch("common.older_than", qkey, state, cutoff, policy.limit or 1000)
            doomed += [r["id"] for r in rows]
    if doomed:
        await tx.fetch("common.drop_jobs", qkey, sorted(set(doomed)))


async def retry_job(tx: Tx, qkey: str, job_id: str, token: str, outcome: Retry) -> None:
    row = await locked(tx, qkey, job_id, token, "retry")
    stack = json_text(list(outcome.stacktrace))
    await tx.fetchrow("retry_job", qkey, job_id, outcome.reason, stack)
    if outcome.delay > 0:
        await delay(tx, qkey, job_id, await tx.now() + outcome.delay, outcome.delay)
    else:
        await enqueue(tx, qkey, job_id, is_lifo(row), "failed")


async def hand_back(tx: Tx, qkey: str, job_id: str, token: str) -> None:
    await locked(tx, qkey, job_id, token, "hand back")
    await tx.execute("common.unstart", qkey, job_id)
    await enqueue(tx, qkey, job_id, True, "active")


async def move_stalled(tx: Tx, qkey: str, max_stalled: int) -> StalledResult:
    result = StalledResult()
    for row in await tx.fetch("move_stalled_jobs_to_wait", qkey):
        job_id = row["id"]
        tx.emit(qkey, "stalled", job_id)
        if row["stalled_counter"] > max_stalled:
            failed = await tx.fetchrow(
                "common.fail", qkey, job_id, STALLED_REASON, row["stacktrace"], True
            )
            assert failed is not None
            await finished(tx, qkey, failed)
            result.failed.append(job_id)
        else:
            await enqueue(tx, qkey, job_id, True, "active")
            result.stalled.append(job_id)
    return result


# ---------------------------------------------------------------------- flows
async def child_finished(tx: Tx, row: asyncpg.Record) -> None:
    """A child completed or failed for good: update its parent."""
    parent = opts_of(row).get("parent")
    if not parent:
        return
    pq, pid = parent["queue"], parent["id"]
    prow = await tx.fetchrow("common.lock_job", pq, pid)
    if prow is None:
        return
    child_key = f"{row['qkey']}:{row['id']}"
    if row["state"] == "completed":
        value = row["returnvalue"] or "null"
        await tx.execute("flows.set_link", pq, pid, child_key, "processed", value)
        await maybe_release(tx, prow)
        return
    await _child_failed(tx, row, prow, child_key)


async def _child_failed(tx: Tx, row: asyncpg.Record, prow: asyncpg.Record, child_key: str) -> None:
    pq, pid = prow["qkey"], prow["id"]
    reason = row["failed_reason"] or ""
    opts = opts_of(row)
    policy = next((name for name in POLICIES if opts.get(name)), None)
    if policy == "failParentOnFailure":
        await _fail_parent(tx, prow, child_key)
    elif policy == "continueParentOnFailure":
        await tx.execute("flows.set_link", pq, pid, child_key, "failed", reason)
        await release(tx, prow)
    elif policy == "ignoreDependencyOnFailure":
        await tx.execute("flows.set_link", pq, pid, child_key, "ignored", reason)
        await maybe_release(tx, prow)
    elif policy == "removeDependencyOnFailure":
        await tx.fetch("flows.drop_link", pq, pid, child_key)
        await maybe_release(tx, prow)
    else:  # the parent keeps waiting; the child shows as failed and unprocessed
        await tx.execute("flows.set_link", pq, pid, child_key, "pending", reason)


async def maybe_release(tx: Tx, prow: asyncpg.Record) -> None:
    if not await tx.fetchval("flows.pending_count", prow["qkey"], prow["id"]):
        await release(tx, prow)


async def release(tx: Tx, prow: asyncpg.Record) -> None:
    """A parent in waiting-children moves on (to waiting, or delayed if it has a delay)."""
    if prow["state"] != "waiting-children":
        return
    pq, pid = prow["qkey"], prow["id"]
    if prow["delay"] > 0:
        await delay(tx, pq, pid, await tx.now() + prow["delay"], prow["delay"])
    else:
        await enqueue(tx, pq, pid, is_lifo(prow), "waiting-children")


async def _fail_parent(tx: Tx, prow: asyncpg.Record, child_key: str) -> None:
    if prow["state"] != "waiting-children":
        return
    reason = f"child {child_key} failed"
    failed = await tx.fetchrow(
        "common.fail", prow["qkey"], prow["id"], reason, prow["stacktrace"], False
    )
    assert failed is not None
    await finished(tx, prow["qkey"], failed)


async def child_removed(tx: Tx, row: asyncpg.Record) -> None:
    """A child went away: it no longer holds its parent back."""
    parent = opts_of(row).get("parent")
    if not parent:
        return
    pq, pid = parent["queue"], parent["id"]
    dropped = await tx.fetch("flows.drop_link", pq, pid, f"{row['qkey']}:{row['id']}")
    if dropped:
        prow = await tx.fetchrow("common.lock_job", pq, pid)
        if prow is not None:
            await maybe_release(tx, prow)


async def remove_unscheduled_job(tx: Tx, qkey: str, job_id: str, remove_children: bool) -> bool:
    """remove_job, except for a scheduler's pending run: only removing the scheduler
    removes that (as in BullMQ, whose removeJob refuses it with error -8)."""
    row = await tx.fetchrow("common.lock_job", qkey, job_id)
    if row is not None and row["state"] in ("delayed", "waiting", "prioritized"):
        scheduler_id = opts_of(row).get("repeatJobKey")
        if scheduler_id is not None:
            entry = await tx.fetchrow("schedulers.get", qkey, scheduler_id)
            if entry is not None and entry["pending"] == job_id:
                return False
    return await remove_job(tx, qkey, job_id, remove_children)


async def remove_job(tx: Tx, qkey: str, job_id: str, remove_children: bool) -> bool:
    row = await tx.fetchrow("common.lock_job", qkey, job_id)
    if row is None or row["state"] == "active":
        return False
    if remove_children:
        await _remove_children(tx, qkey, job_id)
    await tx.fetch("common.drop_jobs", qkey, [job_id])
    tx.emit(qkey, "removed", job_id, {"prev": row["state"]})
    if row["parent_key"] is not None:
        await child_removed(tx, row)
    return True


async def _remove_children(tx: Tx, qkey: str, job_id: str) -> None:
    for link in await tx.fetch("flows.links", qkey, job_id):
        cq, cid = split_key(link["child_key"])
        child = await tx.fetchrow("common.lock_job", cq, cid)
        if child is None or child["state"] == "active":
            continue
        await _remove_children(tx, cq, cid)
        await tx.fetch("common.drop_jobs", cq, [cid])
        tx.emit(cq, "removed", cid, {"prev": child["state"]})


async def move_to_waiting_children(tx: Tx, qkey: str, job_id: str, token: str) -> bool:
    await locked(tx, qkey, job_id, token, "move to waiting-children")
    if not await tx.fetchval("flows.pending_count", qkey, job_id):
        return False
    await tx.fetchrow("common.hold", qkey, job_id)
    tx.emit(qkey, "waiting-children", job_id)
    return True


# ---------------------------------------------------------------------- schedulers
async def upsert_scheduler(
    tx: Tx, qkey: str, scheduler_id: str, spec: dict[str, Any], template: NewJob
) -> JobRecord | None:
    now = await tx.now()
    old = await tx.fetchrow("schedulers.lock", qkey, scheduler_id)
    if old is not None and old["pending"]:
        await drop_pending(tx, qkey, old["pending"])
    await tx.execute(
        "schedulers.upsert",
        qkey,
        scheduler_id,
        json_text(spec),
        template.name,
        template.data,
        json_text(template.opts),
    )
    millis = first_run(spec, now)
    if millis is None:
        return None
    return await _add_run(tx, qkey, scheduler_id, template, millis, 0)


async def _add_run(
    tx: Tx, qkey: str, scheduler_id: str, template: NewJob, millis: int, iterations: int
) -> JobRecord:
    now = await tx.now()
    opts = {
        **template.opts,
        "jobId": f"repeat:{scheduler_id}:{millis}",
        "delay": max(0, millis - now),
        "repeatJobKey": scheduler_id,
    }
    [record] = await add_jobs(tx, qkey, [NewJob(template.name, template.data, opts, now)])
    await tx.execute("schedulers.set_run", qkey, scheduler_id, iterations + 1, millis, record.id)
    return record


async def drop_pending(tx: Tx, qkey: str, job_id: str) -> None:
    row = await tx.fetchrow("common.lock_job", qkey, job_id)
    if row is not None and row["state"] in ("delayed", "waiting", "prioritized"):
        await remove_job(tx, qkey, job_id, remove_children=False)


async def create_next(tx: Tx, qkey: str, row: asyncpg.Record) -> None:
    """A scheduler's pending job became active: create the following one."""
    scheduler_id = opts_of(row)["repeatJobKey"]
    entry = await tx.fetchrow("schedulers.lock", qkey, scheduler_id)
    if entry is None or entry["pending"] != row["id"]:
        return
    spec = json.loads(entry["spec"])
    previous = int(row["id"].rsplit(":", 1)[1])
    count = entry["iteration_count"]
    millis = next_run(spec, previous, count, await tx.now())
    if millis is None:
        await tx.execute("schedulers.set_run", qkey, scheduler_id, count, None, None)
        return
    template = NewJob(
        entry["template_name"], entry["template_data"], json.loads(entry["template_opts"])
    )
    await _add_run(tx, qkey, scheduler_id, template, millis, count)
