"""The workload of issue 40: producers whose batches share locks, in any order.

Each producer adds batches of jobs whose deduplication ids are drawn from a small set
(the layout takes one advisory lock per id), children of parents several producers
share (one lock per parent) with custom ids drawn from a small set, and flows whose
custom ids repeat. Run as a module it is one producer process:

    python -m tests.postgres.lock_load URL QUEUE PARENT_QUEUE PARENTS BATCHES SEED
"""

from __future__ import annotations

import asyncio
import random
import sys
from dataclasses import dataclass
from typing import Any

import psyq

__all__ = ["Load", "dedup_batch", "flows_batch", "make_parents", "produce"]


@dataclass(frozen=True)
class Load:
    """What one producer adds: `batches` rounds of a deduplicated batch (`size` jobs, ids
    drawn from `dedup_ids`, priorities 0-2), children of the shared parents and a bulk of
    flows with custom ids."""

    url: str
    queue: str
    parent_queue: str
    parents: int
    batches: int
    seed: int
    size: int = 50
    dedup_ids: int = 40


def dedup_batch(rng: random.Random, load: Load) -> list[dict[str, Any]]:
    """`size` jobs whose deduplication ids are drawn from `dedup_ids`, in random order."""
    return [
        {
            "name": "dedup",
            "data": {"n": n},
            "opts": {
                "deduplication": {"id": f"d{rng.randrange(load.dedup_ids)}"},
                "priority": rng.randrange(3),
            },
        }
        for n in range(load.size)
    ]


def children_batch(rng: random.Random, load: Load) -> list[dict[str, Any]]:
    """Ten children of parents drawn from the shared ones, their custom ids drawn from a
    set other producers draw from too (an id that exists is attached, or refused)."""
    picks = rng.sample(range(load.parents), k=min(10, load.parents))
    return [
        {
            "name": "child",
            "data": {"parent": p},
            "opts": {
                "jobId": f"c{p}-{rng.randrange(4)}",
                "parent": {"id": f"p{p}", "queue": load.parent_queue},
            },
        }
        for p in picks
    ]


def flows_batch(rng: random.Random, load: Load) -> list[dict[str, Any]]:
    """Three flows whose roots and children have custom ids other producers use too."""
    flows = []
    for _ in range(3):
        root = rng.randrange(8)
        kids = rng.sample(range(6), k=3)
        flows.append(
            {
                "name": "root",
                "queue_name": load.parent_queue,
                "opts": {"jobId": f"r{root}"},
                "children": [
                    {"name": "leaf", "queue_name": load.queue, "opts": {"jobId": f"l{root}-{k}"}}
                    for k in kids
                ],
            }
        )
    return flows


async def make_parents(url: str, queue: str, parent_queue: str, parents: int) -> None:
    """`parents` jobs `p<i>` waiting for a child nobody processes (a queue of its own),
    so they stay parents the producers can add children to."""
    async with psyq.FlowProducer(url) as flows:
        await flows.add_bulk(
            [
                {
                    "name": "parent",
                    "queue_name": parent_queue,
                    "opts": {"jobId": f"p{i}"},
                    "children": [{"name": "hold", "queue_name": f"{queue}-hold"}],
                }
                for i in range(parents)
            ]
        )


async def produce(load: Load) -> int:
    """Add the load's batches; returns the calls made."""
    rng = random.Random(load.seed)
    calls = 0
    async with (
        psyq.Queue(load.queue, connection=load.url) as queue,
        psyq.FlowProducer(load.url) as flows,
    ):
        for _ in range(load.batches):
            await queue.add_bulk(dedup_batch(rng, load))
            await queue.add_bulk(children_batch(rng, load))
            await flows.add_bulk(flows_batch(rng, load))
            calls += 3
    return calls


def main(argv: list[str]) -> None:
    url, queue, parent_queue, parents, batches, seed = argv
    load = Load(url, queue, parent_queue, int(parents), int(batches), int(seed))
    print(asyncio.run(produce(load)))


if __name__ == "__main__":
    main(sys.argv[1:])
