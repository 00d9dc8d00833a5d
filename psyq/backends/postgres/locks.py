"""The one global order of the layout's locks (issue 40).

The layout's functions take their advisory locks as they walk their input: add_flow of
BullMQ's migrations 1-7 one deduplication lock per entry, in the entries' order, and a
parent's row as it counts a child; two batches holding the same ids in other orders
wait on each other until Postgres breaks the cycle (a deadlock, after deadlock_timeout).
A psyq statement that would take more than one of them takes them all first, in the same
transaction, in one order every psyq statement follows:

1. the finalization lock of each queue touched, shared, by key (Node BullMQ 6.7's
   producers and finishers take it first; obliterate takes it exclusively);
2. parents (`bullmq:parent:<queue>:<id>`), by key: a finishing child takes its parent's
   before any row, and its deduplication lock after its own row;
3. deduplication ids (`bullmq:dedup:<queue>:<id>`), by key: Node BullMQ 6.7's add_flow
   takes its batch's in this order before any row;
4. custom job ids (`psyq:job:<queue>:<id>`, psyq's own), by key: two inserts of one id
   wait on each other like a lock;
5. retention (`psyq:retain:<completed|failed>:<queue>`, psyq's own), by key: the layout
   deletes a finished job's elders by count or age inside its finishing function, row by
   row in its scan's order, so two finishers trimming at once, or a finisher and a batch
   that re-adds finished jobs by id, would hold rows the other wants.

"By key" is the lock's key, hashtext(name), as the layout sorts (so hash collisions and
reversed batches agree). The functions then take the same locks again without waiting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Locks", "Obliterating", "entry_locks", "finishing_locks", "retention_lock"]


@dataclass
class Locks:
    """The locks of one statement: statement `locks.take`'s parameters (sql/locks.sql
    holds the order: kinds 'parent', 'dedup', 'job', 'retain')."""

    statement = "locks.take"

    queues: set[str] = field(default_factory=set)
    names: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    finishing: tuple[str, list[str]] | None = None  # a queue and ids of jobs to finish

    def add(self, kind: str, name: str) -> None:
        self.names.append(name)
        self.kinds.append(kind)

    @property
    def several(self) -> bool:
        """Whether the statement would take more than one exclusive lock (with one, no
        order is needed: it holds nothing while it waits)."""
        return self.finishing is not None or len(set(self.names)) > 1

    def args(self) -> list[Any]:
        queue, ids = self.finishing or (None, [])
        return [sorted(self.queues), self.names, self.kinds, queue, ids]


@dataclass(frozen=True)
class Obliterating:
    """What obliterating a queue takes first (`locks.obliterate`): its finalization lock,
    exclusive, then its deduplication keys by id."""

    queue: str
    statement = "locks.obliterate"
    several = True

    def args(self) -> list[Any]:
        return [self.queue]


def entry_locks(entries: Sequence[Mapping[str, Any]]) -> Locks:
    """The locks the layout's add_job / add_flow take for these batch entries."""
    locks = Locks()
    for entry in entries:
        queue = entry["queue"]
        locks.queues.add(queue)
        if "parentId" in entry:
            locks.queues.add(entry["parentQueue"])
            locks.add("parent", f"bullmq:parent:{entry['parentQueue']}:{entry['parentId']}")
        if entry.get("dedupId"):
            locks.add("dedup", f"bullmq:dedup:{queue}:{entry['dedupId']}")
        if _given_id(entry):
            locks.add("job", f"psyq:job:{queue}:{entry['id']}")
    if len(locks.names) > 1:  # several locks: a job added again by id may be trimmed
        for queue in {e["queue"] for e in entries if _given_id(e)}:
            locks.add("retain", retention_lock("completed", queue))
            locks.add("retain", retention_lock("failed", queue))
    return locks


def _given_id(entry: Mapping[str, Any]) -> bool:
    """Whether the entry's id is the caller's (`jobId`), which another add may give too;
    an id psyq made for a flow's parent (a uuid) or the queue's counter gives is new."""
    return "jobId" in entry["opts"]


def retention_lock(kind: str, queue: str) -> str:
    """The lock under which psyq trims a queue's finished jobs of `kind` by count or age
    (`transitions.fail` takes it too)."""
    return f"psyq:retain:{kind}:{queue}"


def finishing_locks(queue: str, ids: list[str], trims: Iterable[str] = ()) -> Locks:
    """The locks the layout's finishing functions take for these jobs (read from their
    rows by the statement): their parents', their own when they have children, their
    deduplication ids', the retention lock of each kind their own removeOnComplete /
    removeOnFail trims by count or age, and of each kind in `trims` (the worker's options
    do); several as soon as one job finishes (move_to_failed takes its own and its
    parent's, move_to_completed its parent's and, after its row, its deduplication id's)."""
    locks = Locks(finishing=(queue, ids))
    for kind in sorted(set(trims)):
        locks.add("retain", retention_lock(kind, queue))
    return locks
