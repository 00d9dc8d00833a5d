"""The Postgres add's floor under each event policy, beside pgqueuer's, interleaved (issue 52).

    python -m bench.studies.pg_events_floor [--url postgresql://postgres@127.0.0.1:5432/postgres]
                                            [--blocks 20] [--block 100] [--rounds 3]
                                            [--compare-sql path/to/an/older/fast.sql]

Three fresh databases of one server (bench/harness/pgdb.py): psyq under `always`, psyq
under `when-read` with no reader, and pgqueuer (its tables installed by its own code, in
its virtualenv). One asyncpg connection each. Each row's statements are replayed bare, one
after the other (each its own commit), in blocks of `--block` operations taken in turn
across the systems, so a host whose load moves moves every system's figure alike:

- psyq `fast.add` bare: psyq's add statement (psyq/backends/postgres/sql/fast.sql) with the
  arguments `Queue.add("x", {"i": n})` sends;
- pgqueuer's enqueue statement bare: the statement its `Queries.enqueue` sends (read from
  pgqueuer at run time: bench/peers/pgqueuer/statements.py), with the arguments of one job;
- the same for calls of 1,000 jobs, per job;
- psyq `Queue.add`, the whole call, under each policy;
- with `--compare-sql`: the `add` statement of that file (an older psyq's fast.sql, e.g.
  the lead's checkout before issue 52) on the `always` database, in the same turns.

Printed: µs per operation, medians of the rounds, and pgqueuer's bare figure over psyq's
(> 1: psyq's statement is cheaper).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import Any

import asyncpg

import psyq
from bench.harness.launch import PEERS, peer_python
from bench.harness.pgdb import fresh_database, peer_dsn
from psyq.backends.postgres import parse_postgres_url
from psyq.backends.postgres.statements import load_statements, parse_sql_file

BULK = 1000
Op = Callable[[int], Awaitable[Any]]


def pgqueuer_statement(url: str) -> str:
    python = peer_python("pgqueuer")
    if isinstance(python, str):
        sys.exit(python)
    env = {**os.environ, **peer_dsn(url)}
    script = str(PEERS["pgqueuer"] / "statements.py")
    done = subprocess.run([str(python), script], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pgqueuer's install failed: {done.stderr.strip()[-400:]}")
    sql: str = json.loads(done.stdout.strip().splitlines()[-1])["enqueue"]
    return sql


async def connect(url: str, mode: str) -> asyncpg.Connection:
    """A connection to `url`'s database; psyq's see the layout's schema first."""
    settings = parse_postgres_url(url)
    path = {} if mode == "pgqueuer" else {"search_path": settings.schema}
    conn: asyncpg.Connection = await asyncpg.connect(settings.dsn, server_settings=path)
    return conn


def psyq_add(conn: asyncpg.Connection, size: int, add: str | None = None) -> Op:
    add = add or load_statements()["fast.add"]
    names, opts = ["x"] * size, [json.dumps({"attempts": 1})] * size
    zeros, nones, ones, no = [0] * size, [None] * size, [1] * size, [False] * size

    def call(n: int) -> Any:
        data = [json.dumps({"i": i}) for i in range(n * size, (n + 1) * size)]
        return conn.fetch(add, "floor", names, data, opts, zeros, zeros, nones, ones, no, None)

    return call


def pgqueuer_add(conn: asyncpg.Connection, sql: str, size: int) -> Op:
    zero = datetime.timedelta(0)

    def call(n: int) -> Any:
        payloads = [json.dumps({"i": i}).encode() for i in range(n * size, (n + 1) * size)]
        return conn.fetch(
            sql, [0] * size, ["x"] * size, payloads, [zero] * size, [None] * size, ["null"] * size
        )

    return call


async def interleaved(ops: dict[str, Op], blocks: int, block: int, per: int) -> dict[str, float]:
    """µs per operation (divided by `per`: jobs per operation) of each op, in turns."""
    spent = dict.fromkeys(ops, 0.0)
    counters = dict.fromkeys(ops, 0)
    for name, op in ops.items():  # warm-up: plans prepared, caches filled
        for _ in range(max(2, block // 10)):
            await op(counters[name])
            counters[name] += 1
    for _ in range(blocks):
        for name, op in ops.items():
            start = time.perf_counter()
            for _ in range(block):
                await op(counters[name])
                counters[name] += 1
            spent[name] += time.perf_counter() - start
    return {name: spent[name] / (blocks * block) / per * 1e6 for name in ops}


async def one_round(
    urls: dict[str, str], sql: str, blocks: int, block: int, older: str | None
) -> dict[str, float]:
    queues = {mode: psyq.Queue("floor", connection=urls[mode]) for mode in ("always", "when-read")}
    conns = {mode: await connect(url, mode) for mode, url in urls.items()}
    try:
        for queue in queues.values():
            await queue.add("x", {"i": -1})  # the layout's first add: the queue's sequence
        singles = {
            "psyq fast.add bare, always": psyq_add(conns["always"], 1),
            "psyq fast.add bare, when-read": psyq_add(conns["when-read"], 1),
            "pgqueuer enqueue bare": pgqueuer_add(conns["pgqueuer"], sql, 1),
        }
        if older is not None:
            singles["psyq fast.add bare, always, older statement"] = psyq_add(
                conns["always"], 1, older
            )
        rows = await interleaved(singles, blocks, block, 1)
        bulk_blocks = max(2, blocks // 4)
        rows |= await interleaved(
            {
                "psyq fast.add bare, always, per job of 1,000": psyq_add(conns["always"], BULK),
                "psyq fast.add bare, when-read, per job of 1,000": psyq_add(
                    conns["when-read"], BULK
                ),
                "pgqueuer enqueue bare, per job of 1,000": pgqueuer_add(
                    conns["pgqueuer"], sql, BULK
                ),
            },
            bulk_blocks,
            2,
            BULK,
        )

        def whole(queue: psyq.Queue) -> Op:
            return lambda n: queue.add("x", {"i": n})

        rows |= await interleaved(
            {f"psyq Queue.add, {mode}": whole(queue) for mode, queue in queues.items()},
            blocks,
            block,
            1,
        )
    finally:
        for queue in queues.values():
            await queue.close()
        for conn in conns.values():
            await conn.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare-sql", help="an older fast.sql whose add to measure too")
    args = parser.parse_args()
    older = None
    if args.compare_sql:
        with open(args.compare_sql, encoding="utf-8") as file:
            older = parse_sql_file("fast", file.read())["fast.add"]
    quiet = args.url + ("&" if "?" in args.url else "?") + "events=when-read"
    runs: dict[str, list[float]] = {}
    for round_ in range(args.rounds):
        with ExitStack() as stack:
            urls = {
                "always": stack.enter_context(fresh_database(args.url, "floor_always")),
                "when-read": stack.enter_context(fresh_database(quiet, "floor_when_read")),
                "pgqueuer": stack.enter_context(fresh_database(args.url, "floor_pgqueuer")),
            }
            sql = pgqueuer_statement(urls["pgqueuer"])
            figures = asyncio.run(one_round(urls, sql, args.blocks, args.block, older))
        print(json.dumps({"round": round_ + 1, **{k: round(v, 1) for k, v in figures.items()}}))
        for row, value in figures.items():
            runs.setdefault(row, []).append(value)
    print(f"\n| row | µs per op, median of {args.rounds} | rounds |\n|---|---:|---|")
    for row, values in runs.items():
        each = ", ".join(f"{v:,.1f}" for v in values)
        print(f"| {row} | {statistics.median(values):,.1f} | {each} |")
    for size in ("", ", per job of 1,000"):
        peer = statistics.median(runs[f"pgqueuer enqueue bare{size}"])
        for mode in ("always", "when-read"):
            mine = statistics.median(runs[f"psyq fast.add bare, {mode}{size}"])
            print(f"pgqueuer / psyq {mode}{size or ', one job'}: {peer / mine:.2f}x")


if __name__ == "__main__":
    main()
