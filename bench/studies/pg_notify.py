"""What a NOTIFY costs a commit on Postgres, with and without a session listening.

    python -m bench.studies.pg_notify [--server postgresql://...] [--commits 4000]
                                      [--clients 1,10,50]

Every add and settle of BullMQ 6's Postgres layout (its functions, and psyq's own
statements, which send what they send) ends in `NOTIFY bullmq_jobs` and/or
`NOTIFY bullmq_events`. This measures the commit rate of a one-row INSERT by `--clients`
concurrent connections (synchronous_commit as the server has it) three ways: plain, with a
`pg_notify` in the same statement while nobody LISTENs on the channel, and the same while
one session LISTENs. Each run has a fresh database. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import asyncpg

from bench.harness.pgdb import fresh_database

INSERT = "INSERT INTO notify_cost (v) VALUES (1)"
INSERT_NOTIFY = (
    "WITH added AS (INSERT INTO notify_cost (v) VALUES (1)) "
    "SELECT pg_notify('psyq_notify_cost', 'queue')"
)


async def rate(url: str, clients: int, commits: int, notify: bool, listen: bool) -> float:
    """Commits per second of `clients` connections committing `commits` inserts in all."""
    admin = await asyncpg.connect(url)
    await admin.execute("CREATE TABLE IF NOT EXISTS notify_cost (id bigserial PRIMARY KEY, v int)")
    listener = await asyncpg.connect(url) if listen else None
    if listener is not None:
        await listener.add_listener("psyq_notify_cost", lambda *args: None)
    conns = [await asyncpg.connect(url) for _ in range(clients)]
    each = commits // clients
    statement = INSERT_NOTIFY if notify else INSERT

    async def commit_all(conn: asyncpg.Connection) -> None:
        for _ in range(each):
            await conn.execute(statement)

    started = time.perf_counter()
    await asyncio.gather(*(commit_all(conn) for conn in conns))
    elapsed = time.perf_counter() - started
    for conn in conns:
        await conn.close()
    if listener is not None:
        await listener.close()
    await admin.execute("TRUNCATE notify_cost")
    await admin.close()
    return each * clients / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--commits", type=int, default=4000)
    parser.add_argument("--clients", default="1,10,50")
    args = parser.parse_args()
    with fresh_database(args.server, "notify") as url:
        print("clients  plain/s  notify, none listening/s  notify, one listening/s")
        for clients in (int(n) for n in args.clients.split(",")):
            plain = asyncio.run(rate(url, clients, args.commits, False, False))
            alone = asyncio.run(rate(url, clients, args.commits, True, False))
            heard = asyncio.run(rate(url, clients, args.commits, True, True))
            print(
                f"{clients:>7}  {plain:>7.0f}  {alone:>9.0f} ({alone / plain:.2f}x)"
                f"  {heard:>14.0f} ({heard / plain:.2f}x)"
            )


if __name__ == "__main__":
    main()
