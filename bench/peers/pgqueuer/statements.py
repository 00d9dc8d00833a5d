"""pgqueuer's tables installed in a database, and the statement its `Queries.enqueue` sends,
read from pgqueuer at run time (bench/studies/pg_events_floor.py runs this in pgqueuer's
virtualenv and replays the statement itself). Prints one JSON line: {"enqueue": SQL}."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, Queries


class Recording(AsyncpgDriver):
    """The driver, keeping the last statement it fetched."""

    sent: str | None = None

    async def fetch(self, query: str, *args: object) -> list[dict[str, Any]]:
        self.sent = query
        return await super().fetch(query, *args)


async def main() -> dict[str, str]:
    conn = await asyncpg.connect(os.environ["PSYQ_BENCH_PG_DSN"])
    try:
        await Queries(AsyncpgDriver(conn)).install()
        recording = Recording(conn)
        await Queries(recording).enqueue(["x"] * 2, [b"{}"] * 2, [0] * 2)
        assert recording.sent is not None
        return {"enqueue": recording.sent}
    finally:
        await conn.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
