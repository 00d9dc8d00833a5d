"""The inclusive-end slice rule every store uses for BullMQ's `start..end` ranges."""

from __future__ import annotations

import pytest

from psyq.rules.slices import inclusive_slice, inclusive_stop

ITEMS = ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, -1, ["a", "b", "c", "d", "e"]),  # the whole list
        (0, 0, ["a"]),  # end is included
        (1, 3, ["b", "c", "d"]),
        (3, 1, []),  # end before start
        (2, 99, ["c", "d", "e"]),  # end past the length
        (7, 9, []),  # start past the length
        (7, -1, []),
        (-2, -1, ["d", "e"]),  # negative start counts from the end
        (-9, -1, ["a", "b", "c", "d", "e"]),  # before the first: from the first
        (0, -2, ["a", "b", "c", "d"]),  # -2: the one before the last, included
        (-3, -2, ["c", "d"]),
        (0, -9, []),  # an end before the first item
    ],
)
def test_inclusive_slice(start: int, end: int, expected: list[str]) -> None:
    assert inclusive_slice(ITEMS, start, end) == expected


def test_it_reads_as_redis_lrange() -> None:
    """LRANGE's rule, for every start and end around a list of five."""
    for start in range(-7, 8):
        for end in range(-7, 8):
            first = max(start + len(ITEMS), 0) if start < 0 else start
            last = end + len(ITEMS) if end < 0 else end
            assert inclusive_slice(ITEMS, start, end) == ITEMS[first : last + 1 if last >= 0 else 0]


def test_an_empty_list_slices_empty() -> None:
    assert inclusive_slice([], 0, -1) == []
    assert inclusive_slice([], 0, 0) == []


def test_inclusive_stop() -> None:
    assert inclusive_stop(-1) is None
    assert inclusive_stop(0) == 1
    assert inclusive_stop(4) == 5
    assert inclusive_stop(-2) == -1
