"""The interop matrix: every case of matrix.py run both ways (Node BullMQ produces and psyq
processes, and the reverse) with BullMQ 5 and 6 on Redis, and with BullMQ 6 on Postgres
(BullMQ's Postgres layout; one schema for the run). Each outcome must equal the one
committed in matrix.json, from which docs/interop.md is rendered. With PSYQ_INTEROP_RECORD=1
the outcomes are written to matrix.json instead (then `python -m tests.interop.render`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.interop import render
from tests.interop.conftest import Sides
from tests.interop.matrix import CASES, Matrix
from tests.interop.sides import NodeSide, PsyqSide

pytestmark = pytest.mark.timeout(60)

DIRECTIONS = {"Node → psyq": ("node", "psyq"), "psyq → Node": ("psyq", "node")}
RECORD = os.environ.get("PSYQ_INTEROP_RECORD") == "1"


@pytest.fixture(scope="session")
def observed() -> Iterator[dict[tuple[str, str, str, str], str]]:
    """Outcomes seen this run; written to matrix.json at the end when recording."""
    seen: dict[tuple[str, str, str, str], str] = {}
    yield seen
    if RECORD and seen:
        results = render.load() if render.RESULTS.exists() else {"stores": {}}
        results["features"] = list(CASES)
        for rows in results["stores"].values():  # features renamed or removed since
            for gone in set(rows) - set(CASES):
                del rows[gone]
        for (store, feature, direction, major), outcome in sorted(seen.items()):
            row = results["stores"].setdefault(store, {}).setdefault(feature, {})
            row.setdefault(direction, {})[major] = outcome
        text = json.dumps(results, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
        render.RESULTS.write_text(text, encoding="utf-8")


def expected(store: str, feature: str, direction: str, major: str) -> str | None:
    if not render.RESULTS.exists():
        return None
    row = render.load()["stores"].get(store, {}).get(feature, {})
    outcome: str | None = row.get(direction, {}).get(major)
    return outcome


@pytest.mark.parametrize("direction", list(DIRECTIONS), ids=["node-psyq", "psyq-node"])
@pytest.mark.parametrize("feature", list(CASES), ids=[f.__name__ for f in CASES.values()])
async def test_feature(
    sides: Sides, feature: str, direction: str, observed: dict[Any, str]
) -> None:
    by_name: dict[str, Any] = {"node": sides.node, "psyq": sides.psyq}
    producer, consumer = (by_name[name] for name in DIRECTIONS[direction])
    matrix = Matrix(producer, consumer, sides.store)
    await CASES[feature](matrix)
    outcome = matrix.outcome()
    observed[(sides.store, feature, direction, sides.major)] = outcome
    if not RECORD:
        assert outcome == expected(sides.store, feature, direction, sides.major), (
            f"{feature} ({direction}, {sides.store}, BullMQ {sides.major}): observed "
            f"{outcome!r}; if that is now right, record it: PSYQ_INTEROP_RECORD=1 pytest "
            "tests/interop/test_matrix.py, "
            "then python -m tests.interop.render"
        )


def test_docs_table_is_rendered_from_the_results() -> None:
    assert render.RESULTS.exists(), "run the matrix with PSYQ_INTEROP_RECORD=1 first"
    results = render.load()
    assert results["features"] == list(CASES), "matrix.json lists other features: record again"
    assert render.PAGE.read_text(encoding="utf-8") == render.render(results), (
        "docs/interop.md differs from matrix.json: python -m tests.interop.render"
    )


def test_both_sides_offer_the_same_methods() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in vars(cls) if not name.startswith("_")} - {"name", "queue"}

    assert public(NodeSide) == public(PsyqSide)
