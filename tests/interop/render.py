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

psyq stores queues in BullMQ's own layouts: on Redis in BullMQ's keys, on Postgres
(`postgresql://`) in BullMQ 6's Postgres layout. So Node BullMQ and psyq share them on
either store: either side adds jobs, runs workers, reads results and manages the queue. The
tables below are generated from the interop matrix (`tests/interop/test_matrix.py`, run
against the npm registry's newest BullMQ 6.x and last 5.x): for each feature, **Node →
psyq** means Node BullMQ produces (adds the jobs, the flow or the scheduler) and a psyq
worker processes, **psyq → Node** the reverse; in both, each side reads back what the
other wrote (states, return values, failed reasons, progress, logs, counts, events) and
they must agree. ✓ means every check passed with every BullMQ major the store was run
with; otherwise the cell names the difference (and the major it concerns). Stack traces
cross as they are: each side reads the other's, in the other language's format.

Regenerate after a change: `PSYQ_INTEROP_RECORD=1 pytest tests/interop/test_matrix.py`
then `python -m tests.interop.render`.
"""

# What the reader of a store's table needs to know: how it was run, and why a cell differs.
NOTES = {
    "redis": "Run with BullMQ 5 and 6 (Node's default Redis backend, ioredis).\n",
    "postgres": """\
Run with BullMQ 6 only (BullMQ 5 has no Postgres backend): Node with
`createPostgresBackend` (`pg`) and psyq on the same schema, which Node's migrations
created. Two things differ from Redis by the store's nature, and psyq follows Node in both:

- **Job keys**: BullMQ's Postgres backend names a job `<queue>:<id>`, with no prefix (in
  `parentKey`, in the keys of `getChildrenValues` and `getFailedChildrenValues`, in a failed
  parent's `failedReason`, in dependencies), and its queue's qualified name is the queue's
  name; psyq on `postgresql://` names them the same (`Job.key`,
  `Job.queue_qualified_name`), and accepts a `parent` option's queue as `<queue>` or
  `bull:<queue>`.
- **getWorkers**: Node lists a queue's workers by the `application_name` of the database's
  sessions (`<queue>` or `<queue>:w:<name>`, as each Node worker names its LISTEN
  connection). Each running psyq worker holds one idle session named `<queue>:w:psyq`, so
  Node lists it; psyq lists its own from its registry, then Node's
  ([backends.md](backends.md), Postgres: the cost, and `announce_workers=false`).
- **getQueueEvents**: Node lists a queue's QueueEvents by the sessions named `<queue>:qe`.
  A backend object that reads a queue's events holds one idle session so named, so Node
  lists a running psyq `QueueEvents` (psyq's QueueEvents on Redis name no connection).

Locks: psyq takes the layout's locks in one global order (the order Node BullMQ 6.7's
own functions take them in), so psyq's producers and workers beside Node's do not
deadlock (design record
[0006 Postgres: one lock order](design/0006-postgres-one-lock-order.md)). Let Node
migrate a shared schema (`migrate: true`): psyq creates it at version 4 (what the
`bullmq` PyPI package ships), and Node 6.7's own calls take their deduplication locks in
order only from its migration 8 on; a deadlock that still happens is retried by psyq and
counted (`psyq_store_conflicts_total`).

A queue whose events Node's `QueueEvents` reads keeps the event policy `always` (the
default): under `when-read` psyq writes a queue's event rows only while a psyq
`QueueEvents` holds a lease on it, and Node's QueueEvents takes none, so it would see
only the events of the layout's own functions ([backends.md](backends.md), Postgres,
Event policy). Node's producers and workers work beside `when-read` as beside `always`:
they read the jobs, not the events; Node's own calls write their events under either.

One thing the layout leaves to each reader: event ids are numbered when written and seen
when committed, so two writers can make them visible out of order. psyq's `QueueEvents`
waits for the writers in flight before it moves past an id; Node's reads the newest ids
it sees and can, rarely, skip an event written beside another
([backends.md](backends.md), Postgres, Events).
""",
}


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
    known = [store for store in STORE_NAMES if store in results["stores"]]
    for store in known + sorted(set(results["stores"]) - set(known)):
        features = results["stores"][store]
        title = STORE_NAMES.get(store, store)
        lines.append(f"## {title}\n")
        if store in NOTES:
            lines.append(NOTES[store])
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
