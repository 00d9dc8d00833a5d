"""The 4-ary heap: order, lazy deletion, rebuilds."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from psyq.backends.engine import Heap4


def drain(heap: Heap4) -> list[str]:
    out = []
    while (job_id := heap.pop()) is not None:
        out.append(job_id)
    return out


def test_pops_lowest_priority_then_sequence() -> None:
    heap = Heap4()
    heap.push(5, 1, "a")
    heap.push(1, 2, "b")
    heap.push(5, 0, "c")
    heap.push(3, 3, "d")
    assert drain(heap) == ["b", "d", "c", "a"]
    assert len(heap) == 0


def test_discard_skips_the_entry_and_keeps_count() -> None:
    heap = Heap4()
    for i in range(10):
        heap.push(1, i, str(i))
    assert heap.discard("0") and heap.discard("5")
    assert not heap.discard("5")
    assert len(heap) == 8
    assert "5" not in heap
    assert drain(heap) == ["1", "2", "3", "4", "6", "7", "8", "9"]


def test_push_again_replaces_the_old_entry() -> None:
    heap = Heap4()
    heap.push(9, 1, "x")
    heap.push(1, 2, "y")
    heap.push(0, 3, "x")
    assert len(heap) == 2
    assert drain(heap) == ["x", "y"]


def test_many_discards_rebuild_and_stay_correct() -> None:
    heap = Heap4()
    rng = random.Random(7)
    ids = [str(i) for i in range(2000)]
    for seq, job_id in enumerate(ids):
        heap.push(rng.randint(1, 50), seq, job_id)
    for job_id in ids[::3]:
        heap.discard(job_id)
    assert len(heap._items) <= 2 * len(heap) + 64
    expected = [entry[2] for entry in heap.ordered()]
    assert drain(heap) == expected
    assert len(expected) == len(ids) - len(ids[::3])


@given(st.lists(st.tuples(st.integers(0, 20), st.booleans()), max_size=200))
def test_matches_sorted_order(ops: list[tuple[int, bool]]) -> None:
    heap = Heap4()
    live: dict[str, tuple[int, int]] = {}
    for seq, (priority, discard) in enumerate(ops):
        job_id = str(seq)
        heap.push(priority, seq, job_id)
        live[job_id] = (priority, seq)
        if discard and seq % 2:
            heap.discard(job_id)
            del live[job_id]
    expected = [job_id for job_id, _ in sorted(live.items(), key=lambda kv: kv[1])]
    assert drain(heap) == expected
