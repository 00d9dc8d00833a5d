"""The metrics fold. psyq appends each settled batch's finished count to its own table
(psyq_finished: counting a finish then locks no shared row) and folds the counts into the
layout's metrics rows, which Node BullMQ's getMetrics reads. The fold must leave those
rows exactly as the layout's own collect_metrics, called once per finished job in finish
order, would leave them: checked here against that function on generated histories
(counts at the same time, minutes apart, out of order, weeks apart; rows missing or
already there; one fold or two)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyq.backends.postgres import PostgresBackend

from .conftest import url_for

T0 = 1_764_000_000_000  # a time in ms
MINUTE = 60_000
steps = st.one_of(
    st.just(0),
    st.integers(1, 3 * MINUTE),
    st.integers(-MINUTE, -1),  # another process's clock: counts come out of order
    st.just(8 * 24 * 60 * MINUTE),  # past the 10,080 points kept
)
history = st.lists(
    st.tuples(st.sampled_from(["completed", "failed"]), steps, st.integers(1, 40)),
    min_size=1,
    max_size=10,
)
names = itertools.count()


def timed(counts: list[tuple[str, int, int]], start: int) -> list[tuple[str, int, int]]:
    """(kind, step, jobs) -> (kind, at_ms, jobs), the steps added up from `start`."""
    at, out = start, []
    for kind, step, jobs in counts:
        at += step
        out.append((kind, at, jobs))
    return out


async def by_the_layout(
    conn: asyncpg.Connection, queue: str, counts: list[tuple[str, int, int]]
) -> None:
    """collect_metrics once per job, in finish order (time, then the order appended)."""
    ordered = sorted(enumerate(counts), key=lambda item: (item[1][1], item[0]))
    for _, (kind, at_ms, jobs) in ordered:
        for _ in range(jobs):
            await conn.execute("SELECT collect_metrics($1, $2, 10080, $3)", queue, kind, at_ms)


async def by_the_fold(
    backend: PostgresBackend,
    conn: asyncpg.Connection,
    queue: str,
    counts: list[tuple[str, int, int]],
) -> None:
    for kind, at_ms, jobs in counts:
        await conn.execute(
            "INSERT INTO psyq_finished (queue, kind, at_ms, jobs) VALUES ($1, $2, $3, $4)",
            queue,
            kind,
            at_ms,
            jobs,
        )
    await backend._fold(queue)


async def metrics(conn: asyncpg.Connection, queue: str) -> dict[str, tuple[object, ...]]:
    rows = await conn.fetch(
        "SELECT kind, count, prev_ts, prev_count, data FROM metrics WHERE queue = $1", queue
    )
    return {row["kind"]: tuple(row)[1:] for row in rows}


@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.lists(
        st.tuples(st.sampled_from(["completed", "failed"]), steps, st.integers(1, 5)), max_size=3
    ),
    first=history,
    second=st.lists(history.flatmap(st.just), max_size=1),
)
async def test_the_fold_leaves_the_rows_collect_metrics_would(
    pg_server: str,
    fresh_schema: Callable[[], str],
    before: list[tuple[str, int, int]],
    first: list[tuple[str, int, int]],
    second: list[list[tuple[str, int, int]]],
) -> None:
    schema = fresh_schema()
    backend = PostgresBackend(url_for(pg_server, schema))
    await backend.open()
    conn = await asyncpg.connect(pg_server, server_settings={"search_path": schema})
    try:
        n = next(names)
        layout, folded = f"layout{n}", f"folded{n}"
        earlier = timed(before, T0)
        for queue in (layout, folded):  # a history collected before, the same for both
            await by_the_layout(conn, queue, earlier)
        start = earlier[-1][1] if earlier else T0
        for part in [first, *second]:
            counts = timed(part, start)
            start = counts[-1][1]
            await by_the_layout(conn, layout, counts)
            await by_the_fold(backend, conn, folded, counts)
            assert await metrics(conn, folded) == await metrics(conn, layout)
        assert (
            await conn.fetchval("SELECT count(*) FROM psyq_finished WHERE queue = $1", folded) == 0
        )
    finally:
        await conn.close()
        await backend.close()
