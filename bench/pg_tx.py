"""A job added inside the application's transaction beside a plain add (issue 36).

    python bench/pg_tx.py [--url postgresql://postgres@127.0.0.1:5432/test]
                          [--adds 300] [--runs 3]

In a database of its own (bench/pgdb.py), one process, no worker. Rows, each `adds`
operations one after the other, in microseconds per operation:

- `plain add`: `queue.add()` on the backend's pool;
- `tx add (asyncpg)` / `tx add (psycopg)`: BEGIN, `queue.add(transaction=conn)`, COMMIT
  on the application's connection;
- `dual write`: the application's transaction (BEGIN, INSERT a row, COMMIT), then a
  plain add: what an application does without `transaction=` (not atomic);
- `outbox`: BEGIN, INSERT a row, `queue.add(transaction=conn)`, COMMIT (asyncpg).

Prints every run, then the median of `runs`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psyq
from bench.pgdb import fresh_database

ORDERS = "CREATE TABLE IF NOT EXISTS public.orders (id serial PRIMARY KEY, item text)"
INSERT = "INSERT INTO public.orders (item) VALUES ('book')"


def rows(queue: psyq.Queue, pg: Any, pc: Any) -> dict[str, Callable[[], Awaitable[object]]]:
    async def plain() -> None:
        await queue.add("x", {"n": 1})

    async def tx_asyncpg() -> None:
        async with pg.transaction():
            await queue.add("x", {"n": 1}, transaction=pg)

    async def tx_psycopg() -> None:
        async with pc.transaction():
            await queue.add("x", {"n": 1}, transaction=pc)

    async def dual_write() -> None:
        async with pg.transaction():
            await pg.execute(INSERT)
        await queue.add("x", {"n": 1})

    async def outbox() -> None:
        async with pg.transaction():
            await pg.execute(INSERT)
            await queue.add("x", {"n": 1}, transaction=pg)

    return {
        "plain add": plain,
        "tx add (asyncpg)": tx_asyncpg,
        "tx add (psycopg)": tx_psycopg,
        "dual write": dual_write,
        "outbox": outbox,
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
                start = time.perf_counter()
                for _ in range(adds):
                    await step()
                figures[name] = (time.perf_counter() - start) / adds * 1e6
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
        print(f"  {name:18} {statistics.median(run[name] for run in runs):8.0f}")


if __name__ == "__main__":
    main()
