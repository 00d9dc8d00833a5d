"""Render docs/interop.md from the interop matrix's results (tests/interop/matrix.json), so
the table cannot drift from what the matrix observed: `python -m tests.interop.render`
writes it, and test_matrix.py fails when the committed page differs from the rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("matrix.json")
PAGE = Path(__file__).parents[2] / "docs" / "interop.md"
DIRECTIONS = ("Node → psyq", "psyq → Node")
STORE_NAMES = {"redis": "Redis", "postgres": "Postgres"}

INTRO = """\
# Node BullMQ and psyq on the same queues

psyq's Redis backend stores queues in BullMQ's layout, so Node BullMQ and psyq share them:
either side adds jobs, runs workers, reads results and manages the queue. The table below
is generated from the interop matrix (`tests/interop/test_matrix.py`, run against the npm
registry's newest BullMQ 6.x and last 5.x): for each feature, **Node → psyq** means Node
BullMQ produces (adds the jobs, the flow or the scheduler) and a psyq worker processes,
**psyq → Node** the reverse; in both, each side reads back what the other wrote (states,
return values, failed reasons, progress, logs, counts, events) and they must agree.
✓ means every check passed with both BullMQ majors; otherwise the cell names the
difference (and the major it concerns). Stack traces cross as they are: each side reads
the other's, in the other language's format.

Postgres is not in the table yet: psyq's Postgres backend does not speak BullMQ 6's
Postgres layout, so Node BullMQ cannot share its queues.

Regenerate after a change: `PSYQ_INTEROP_RECORD=1 pytest tests/interop/test_matrix.py`
then `python -m tests.interop.render`.
"""


def load() -> dict[str, Any]:
    results: dict[str, Any] = json.loads(RESULTS.read_text(encoding="utf-8"))
    return results


def cell(outcomes: dict[str, str]) -> str:
    """One table cell from {major: outcome}."""
    if not outcomes:
        return "not run"
    values = set(outcomes.values())
    if len(values) == 1:
        return values.pop()
    return "<br>".join(f"BullMQ {major}.x: {outcomes[major]}" for major in sorted(outcomes))


def render(results: dict[str, Any]) -> str:
    lines = [INTRO]
    for store, features in results["stores"].items():
        title = STORE_NAMES.get(store, store)
        lines.append(f"## {title}\n")
        lines.append(f"| feature | {' | '.join(DIRECTIONS)} |")
        lines.append("|---|" + "---|" * len(DIRECTIONS))
        for feature in results["features"]:
            row = features.get(feature, {})
            cells = [cell(row.get(direction, {})).replace("|", "\\|") for direction in DIRECTIONS]
            lines.append(f"| {feature} | {' | '.join(cells)} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    PAGE.write_text(render(load()), encoding="utf-8")
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
