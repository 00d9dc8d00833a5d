"""Which flows of the source a live move can take now, and in which order.

A flow moves as a unit: a job of it taken away from the rest could run on B before its parent
is there (its completion would find no parent to tell) or leave a parent on A waiting for a
child that completes on B. So the mover reads every flow member of the moved queues on A
(jobs with a parent, parents), groups them into trees by their parent keys, and moves a tree
only when none of its members is active (a member held by an A worker finishes there first)
and none of its parents or pending children lies in a queue that is not moved. Members go
parent first, so a child that B runs at once finds its parent in B.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from psyq.backends.base import JobRecord

__all__ = ["FlowMember", "movable_trees"]


@dataclass(frozen=True)
class FlowMember:
    key: str  # the job's key on the source
    queue: str
    job: JobRecord
    payload: dict[str, Any]  # as journaled (journal.job_payload): the job, logs, deps


def movable_trees(
    members: Iterable[FlowMember],
    split_key: Callable[[str], tuple[str, str]],
    queues: set[str],
) -> list[list[FlowMember]]:
    """The trees that can move now, each parent before its children (breadth first)."""
    by_key = {member.key: member for member in members}
    children: dict[str, list[FlowMember]] = {}
    roots = []
    for member in by_key.values():
        parent = member.job.parent_key
        if parent is not None and parent in by_key:
            children.setdefault(parent, []).append(member)
        else:
            roots.append(member)
    trees = []
    for root in roots:
        tree = [root]
        for member in tree:  # grows while read: breadth first
            tree.extend(children.get(member.key, ()))
        if all(_can_move(member, by_key, split_key, queues) for member in tree):
            trees.append(tree)
    return trees


def _can_move(
    member: FlowMember,
    by_key: dict[str, FlowMember],
    split_key: Callable[[str], tuple[str, str]],
    queues: set[str],
) -> bool:
    if member.job.state == "active":
        return False
    parent = member.job.parent_key
    if parent is not None and parent not in by_key and split_key(parent)[0] not in queues:
        return False  # its parent waits in a queue this move leaves on A
    pending = (member.payload.get("deps") or {}).get("pending") or ()
    return all(split_key(key)[0] in queues for key in pending)
