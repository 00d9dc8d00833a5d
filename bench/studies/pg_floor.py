"""Where a single add on Postgres spends its time: psyq's and pgqueuer's add beside their own
statements replayed bare, and the server's floor (issue 35, item 3).

    python -m bench.studies.pg_floor [--url postgresql://postgres@127.0.0.1:5432/postgres]
                                     [--adds 2000] [--rounds 3]

One asyncpg connection per row, one operation after the other (each its own commit,
`synchronous_commit` as the server has it), after 100 warm-up ones; each system in a fresh
database per round (bench/harness/pgdb.py). Rows, microseconds per operation (median of the rounds):

- `SELECT 1`: a round trip, the floor of any call;
- `INSERT one row`: a one-column insert into a table of its own, committed: the floor of
  any durable add;
- psyq `fast.add` bare: psyq's add statement (psyq/backends/postgres/sql/fast.sql) with the
  arguments `Queue.add("x", {"i": n})` sends, prepared once, no psyq Python around it;
- psyq `Queue.add`: the whole call;
- the layout's `add_job` bare: the function of BullMQ 6's Postgres layout that Node BullMQ
  calls for a single add (psyq calls it for jobs with custom ids, parents or
  deduplication), through psyq's statement `adding.one`;
- pgqueuer's enqueue statement bare: the statement its `Queries.enqueue` sends (read from
  pgqueuer at run time, in its own virtualenv), replayed the same way;
- pgqueuer `Queries.enqueue`: the whole call, on `AsyncpgDriver` (its fastest single add);
- the same for calls of 1,000 jobs (`add_bulk`; the layout's `add_jobs_bulk`, which psyq
  calls for a bulk through the layout; pgqueuer's `enqueue` of lists), per job.

The difference between a whole call and its bare statement is the client's own work; the
difference between the bare statements is what each layout costs the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import asyncpg

import psyq
from bench.harness.launch import PEERS, peer_python
from bench.harness.pgdb import fresh_database, peer_dsn
from psyq.backends.postgres import parse_postgres_url
from psyq.backends.postgres.statements import load_statements

WARMUP = 100
BULK, BULK_CALLS = 1000, 20  # the add_bulk rows: calls of 1,000 jobs
PEER = PEERS["pgqueuer"] / "floor.py"


async def per_op(call: Any, adds: int) -> float:
    """Microseconds per `await call(n)`, after the warm-up ones (a tenth of them for the
    calls of 1,000 jobs)."""
    for n in range(WARMUP if adds > BULK_CALLS else 2):
        await call(n)
    start = time.perf_counter()
    for n in range(adds):
        await call(n)
    return (time.perf_counter() - start) / adds * 1e6


async def psyq_rows(url: str, adds: int) -> dict[str, float]:
    rows: dict[str, float] = {}
    async with psyq.Queue("floor", connection=url) as queue:
        await queue.add("x", {"i": -1})  # the layout's first add creates the queue's sequence
        rows["psyq Queue.add"] = await per_op(lambda n: queue.add("x", {"i": n}), adds)

        def add_bulk(n: int) -> Any:
            return queue.add_bulk([{"name": "x", "data": {"i": i}} for i in range(BULK)])

        rows["psyq add_bulk, per job of 1,000"] = await per_op(add_bulk, BULK_CALLS) / BULK
    settings = parse_postgres_url(url)
    conn = await asyncpg.connect(settings.dsn, server_settings={"search_path": settings.schema})
    try:
        rows["SELECT 1"] = await per_op(lambda n: conn.fetchval("SELECT 1"), adds)
        await conn.execute("CREATE TABLE floor_rows (n integer)")
        insert = "INSERT INTO floor_rows VALUES ($1)"
        rows["INSERT one row"] = await per_op(lambda n: conn.execute(insert, n), adds)
        add = load_statements()["fast.add"]
        options = json.dumps({"attempts": 1})

        def bare(n: int) -> Any:
            data = [json.dumps({"i": n})]
            return conn.fetch(
                add, "floor", ["x"], data, [options], [0], [0], [None], [1], [False], None
            )

        rows["psyq fast.add bare"] = await per_op(bare, adds)
        layout = load_statements()["adding.one"]

        def add_job(n: int) -> Any:
            data = json.dumps({"i": n})
            args = ("floor", "", "x", data, options, 0, 0, None, 1, None, None, None, None, False)
            return conn.fetch(layout, *args)

        rows["the layout's add_job bare (Node BullMQ 6's add)"] = await per_op(add_job, adds)
        names, opts = ["x"] * BULK, [options] * BULK

        def bulk(n: int) -> Any:
            data = [json.dumps({"i": i}) for i in range(n * BULK, (n + 1) * BULK)]
            zeros, nones, ones, no = [0] * BULK, [None] * BULK, [1] * BULK, [False] * BULK
            return conn.fetch(add, "floor", names, data, opts, zeros, zeros, nones, ones, no, None)

        rows["psyq fast.add bare, per job of 1,000"] = await per_op(bulk, BULK_CALLS) / BULK
        layout_bulk = load_statements()["adding.bulk"]
        entry: dict[str, Any] = {"queue": "floor", "id": "", "name": "x", "opts": {"attempts": 1}}
        entry.update(priority=0, delay=0, attempts=1, lifo=False)

        def add_jobs_bulk(n: int) -> Any:
            given = [{**entry, "data": json.dumps({"i": i})} for i in range(BULK)]
            return conn.fetch(layout_bulk, "floor", json.dumps(given))

        per_job = await per_op(add_jobs_bulk, BULK_CALLS) / BULK
        rows["the layout's add_jobs_bulk bare, per job of 1,000"] = per_job
    finally:
        await conn.close()
    return rows


def pgqueuer_rows(url: str, adds: int) -> dict[str, float] | str:
    python = peer_python("pgqueuer")
    if isinstance(python, str):
        return python
    env = {
        **os.environ,
        **peer_dsn(url),
        "PSYQ_FLOOR_ADDS": str(adds),
        "PSYQ_FLOOR_WARMUP": str(WARMUP),
    }
    done = subprocess.run(
        [str(python), str(PEER)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"pgqueuer's floor run failed: {done.stderr.strip()[-400:]}"
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        with fresh_database(args.url, "floor_psyq") as url:
            figures = asyncio.run(psyq_rows(url, args.adds))
        with fresh_database(args.url, "floor_pgqueuer") as url:
            peer = pgqueuer_rows(url, args.adds)
        if isinstance(peer, str):
            sys.exit(peer)
        figures.update(peer)
        print(json.dumps({"round": round_ + 1, **{k: round(v, 1) for k, v in figures.items()}}))
        for row, value in figures.items():
            runs.setdefault(row, []).append(value)
    print(f"\n| row | µs per op, median of {args.rounds} | rounds |\n|---|---:|---|")
    for row, values in runs.items():
        each = ", ".join(f"{v:,.0f}" for v in values)
        print(f"| {row} | {statistics.median(values):,.0f} | {each} |")


if __name__ == "__main__":
    main()
