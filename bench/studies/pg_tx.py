"""A job added inside the application's transaction beside a plain add (issue 36).

    python -m bench.studies.pg_tx [--url postgresql://postgres@127.0.0.1:5432/test]
                                  [--adds 300] [--runs 3]

In a database of its own (bench/harness/pgdb.py), one process, no worker. Rows, each `adds`
operations one after the other, in microseconds per operation:

- `plain add`: `queue.add()` on the backend's pool;
- per driver (asyncpg, psycopg 3; the application's connection in autocommit, so
  `conn.transaction()` sends BEGIN and COMMIT):
  - `tx add, the call`: the `queue.add(transaction=conn)` call alone, timed inside a
    transaction already open (BEGIN before the clock starts, COMMIT after it stops):
    psyq's part, to hold against `plain add`;
  - `tx add, BEGIN..COMMIT`: the whole BEGIN, `queue.add(transaction=conn)`, COMMIT;
  - `app INSERT, the call`: the application's own one-row INSERT (a parameter, so
    prepared as psyq's statements are), timed as `tx add, the call`: the floor of one
    statement on that connection;
- `dual write`: the application's transaction (BEGIN, INSERT a row, COMMIT), then a
  plain add: what an application does without `transaction=` (not atomic);
- `outbox`: BEGIN, INSERT a row, `queue.add(transaction=conn)`, COMMIT (asyncpg).

Warm-up operations first (statements prepared, pool connections open, the application's
connection checked once: transaction.py). Prints every run, then the median of `runs`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psycopg

import psyq
from bench.harness.pgdb import fresh_database

ORDERS = "CREATE TABLE IF NOT EXISTS public.orders (id serial PRIMARY KEY, item text)"
INSERT = "INSERT INTO public.orders (item) VALUES ('book')"
INSERT_ASYNCPG = "INSERT INTO public.orders (item) VALUES ($1)"
INSERT_PSYCOPG = "INSERT INTO public.orders (item) VALUES (%s)"

# an operation: the seconds its timed part took
Step = Callable[[], Awaitable[float]]


def timed(run: Callable[[], Awaitable[object]]) -> Step:
    async def step() -> float:
        start = time.perf_counter()
        await run()
        return time.perf_counter() - start

    return step


def inside(conn: Any, run: Callable[[], Awaitable[object]]) -> Step:
    """`run` timed alone inside a transaction of `conn` opened and committed off the clock."""

    async def step() -> float:
        async with conn.transaction():
            start = time.perf_counter()
            await run()
            return time.perf_counter() - start

    return step


def rows(queue: psyq.Queue, pg: Any, pc: Any) -> dict[str, Step]:
    async def plain() -> None:
        await queue.add("x", {"n": 1})

    def add_on(conn: Any) -> Callable[[], Awaitable[object]]:
        async def add() -> None:
            await queue.add("x", {"n": 1}, transaction=conn)

        return add

    def whole(conn: Any) -> Callable[[], Awaitable[object]]:
        async def run() -> None:
            async with conn.transaction():
                await queue.add("x", {"n": 1}, transaction=conn)

        return run

    async def insert_asyncpg() -> None:
        await pg.execute(INSERT_ASYNCPG, "book")

    async def insert_psycopg() -> None:
        await pc.execute(INSERT_PSYCOPG, ("book",))

    async def dual_write() -> None:
        async with pg.transaction():
            await pg.execute(INSERT)
        await queue.add("x", {"n": 1})

    async def outbox() -> None:
        async with pg.transaction():
            await pg.execute(INSERT)
            await queue.add("x", {"n": 1}, transaction=pg)

    return {
        "plain add": timed(plain),
        "tx add, the call (asyncpg)": inside(pg, add_on(pg)),
        "tx add, BEGIN..COMMIT (asyncpg)": timed(whole(pg)),
        "app INSERT, the call (asyncpg)": inside(pg, insert_asyncpg),
        "tx add, the call (psycopg)": inside(pc, add_on(pc)),
        "tx add, BEGIN..COMMIT (psycopg)": timed(whole(pc)),
        "app INSERT, the call (psycopg)": inside(pc, insert_psycopg),
        "dual write": timed(dual_write),
        "outbox": timed(outbox),
    }


async def run_once(url: str, adds: int) -> dict[str, float]:
    dsn = urlunsplit(urlsplit(url)._replace(query=""))
    pg = await asyncpg.connect(dsn)
    pc = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        await pg.execute(ORDERS)
        async with psyq.Queue("bench-tx", connection=url) as queue:
            figures = {}
            for name, step in rows(queue, pg, pc).items():
                for _ in range(20):  # warm-up: statements prepared, pool connections open
                    await step()
                spent = 0.0
                for _ in range(adds):
                    spent += await step()
                figures[name] = spent / adds * 1e6
            return figures
    finally:
        await pg.close()
        await pc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--adds", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for n in range(args.runs):
        with fresh_database(args.url, "pg_tx") as url:
            runs.append(asyncio.run(run_once(url, args.adds)))
        print(f"run {n + 1}: " + ", ".join(f"{k} {v:.0f} us" for k, v in runs[-1].items()))
    print(f"\nmedian of {args.runs} runs, {args.adds} operations each, us per operation:")
    for name in runs[0]:
        print(f"  {name:34} {statistics.median(run[name] for run in runs):8.0f}")


if __name__ == "__main__":
    main()
