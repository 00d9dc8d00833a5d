"""pgqueuer's single add beside its own statement replayed bare (bench/studies/pg_floor.py runs this
in pgqueuer's virtualenv). Prints one JSON line: microseconds per `Queries.enqueue` on
`AsyncpgDriver` (its documented setup, its fastest single add) and per bare replay of the
statement that call sends, read from pgqueuer at run time, on one connection each."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, Queries

ADDS = int(os.environ.get("PSYQ_FLOOR_ADDS", "2000"))
WARMUP = int(os.environ.get("PSYQ_FLOOR_WARMUP", "100"))
BULK, BULK_CALLS = 1000, 20  # calls of 1,000 jobs, as bench/studies/pg_floor.py's


class Recording(AsyncpgDriver):
    """The driver, keeping the last statement and arguments it fetched."""

    sent: tuple[str, tuple[Any, ...]] | None = None

    async def fetch(self, query: str, *args: object) -> list[dict[str, object]]:
        self.sent = (query, args)
        return await super().fetch(query, *args)


async def per_op(call: Any, calls: int = ADDS) -> float:
    for n in range(WARMUP if calls > BULK_CALLS else 2):
        await call(n)
    start = time.perf_counter()
    for n in range(calls):
        await call(n)
    return (time.perf_counter() - start) / calls * 1e6


async def main() -> dict[str, float]:
    dsn = os.environ["PSYQ_BENCH_PG_DSN"]
    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
        queries = Queries(AsyncpgDriver(conn))
        whole = await per_op(lambda n: queries.enqueue("x", json.dumps({"i": n}).encode()))
        recording = Recording(conn)
        await Queries(recording).enqueue("x", b'{"i": -1}')
        assert recording.sent is not None
        query, args = recording.sent
        bare = await per_op(lambda n: conn.fetch(query, *args))

        def bulk(n: int) -> Any:
            payloads = [json.dumps({"i": i}).encode() for i in range(BULK)]
            return queries.enqueue(["x"] * BULK, payloads, [0] * BULK)

        bulk_whole = await per_op(bulk, BULK_CALLS) / BULK
        await Queries(recording).enqueue(["x"] * BULK, [b"{}"] * BULK, [0] * BULK)
        query, args = recording.sent
        bulk_bare = await per_op(lambda n: conn.fetch(query, *args), BULK_CALLS) / BULK
        return {
            "pgqueuer Queries.enqueue": whole,
            "pgqueuer enqueue bare": bare,
            "pgqueuer enqueue of lists, per job of 1,000": bulk_whole,
            "pgqueuer enqueue of lists bare, per job of 1,000": bulk_bare,
        }
    finally:
        await conn.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
