"""An application process for tests/postgres/test_transaction_crash.py (run with `python -m`):
each order is one transaction on the application's own asyncpg connection — its row
inserted and its job added with `transaction=` — then committed, acknowledged on stdout
(`committed N`). Inside each transaction, once the job is added, it says so (`added N`)
and lingers 20 ms before committing, so the test can kill it there too."""

from __future__ import annotations

import asyncio
import sys

import asyncpg

import psyq


async def place_orders(server: str, url: str, queue_name: str, table: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        async with psyq.Queue(queue_name, connection=url) as queue:
            print("ready", flush=True)
            n = 0
            while True:
                async with conn.transaction():
                    await conn.execute(f"INSERT INTO {table} (n) VALUES ($1)", n)
                    await queue.add("mail", {"n": n}, transaction=conn)
                    print(f"added {n}", flush=True)
                    await asyncio.sleep(0.02)  # sleep: the transaction stays open a while
                print(f"committed {n}", flush=True)
                n += 1
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(place_orders(*sys.argv[1:5]))
