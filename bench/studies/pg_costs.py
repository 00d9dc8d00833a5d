"""Where processing on Postgres spends, per job: psyq's Worker beside pgqueuer's
QueueManager and Node BullMQ 6's Worker at the same concurrency, with what each costs the
server (issue 35, item 3: the floor of the processing rows).

    python -m bench.studies.pg_costs [--url postgresql://postgres@127.0.0.1:5432/postgres]
                                     [--jobs 20000] [--concurrency 10,100] [--rounds 3]

Per round and system, a fresh database (bench/harness/pgdb.py); per concurrency, `--jobs` no-op
jobs added in bulk first (not counted), then processed as the runner's cN rows process
them: psyq, a `Worker(concurrency=N)`; pgqueuer, a QueueManager with batch_size N/2 and
max_concurrent_tasks N in drain mode, in both of its setups (`AsyncpgDriver` on a
connection of its own, and `AsyncpgPoolDriver`); Node BullMQ 6.7 on its Postgres backend,
a `Worker` with concurrency N (bench/peers/bullmq-pg in its `costs` mode). Around the
processing alone (bench/peers/pg_counters.py): jobs/s, write transactions per job (each one a
commit that waits for its WAL flush, `synchronous_commit` on), WAL bytes per job, and CPU
µs per job: the host's, the client process's and the rest (the server's, on a quiet host).
Medians of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import asyncpg

import psyq
from bench.harness.figures import row_medians
from bench.harness.launch import peer_python, run_node_peer, run_peer_command
from bench.harness.pgdb import fresh_database, peer_dsn
from bench.harness.workloads import drain, fill, fresh
from bench.peers.pg_counters import per_job, snapshot
from psyq.backends.postgres import parse_postgres_url


async def psyq_rows(url: str, jobs: int, levels: list[int]) -> dict[str, dict[str, float]]:
    admin = await asyncpg.connect(parse_postgres_url(url).dsn)
    try:
        return {f"psyq c{c}": await psyq_level(url, admin, jobs, c) for c in levels}
    finally:
        await admin.close()


async def psyq_level(url: str, admin: Any, jobs: int, concurrency: int) -> dict[str, float]:
    marks: list[dict[str, float]] = []

    async def probe() -> None:
        marks.append(await snapshot(admin))

    async with psyq.Queue(fresh(f"c{concurrency}"), connection=url) as queue:
        await fill(queue, jobs)
        await drain(url, queue, jobs, concurrency, probe)
        await queue.obliterate()
    return per_job(marks[0], marks[1], jobs)


def pgqueuer_rows(url: str, jobs: int, levels: list[int]) -> dict[str, Any] | str:
    """pgqueuer in its virtualenv (bench/peers/pgqueuer/costs.py)."""
    python = peer_python("pgqueuer")
    if isinstance(python, str):
        return python
    command = [str(python), "costs.py", json.dumps({"jobs": jobs, "levels": levels})]
    return run_peer_command("pgqueuer", command, peer_dsn(url))


def node_rows(url: str, jobs: int, levels: list[int]) -> dict[str, Any] | str:
    """Node BullMQ 6 on its Postgres backend (bench/peers/bullmq-pg, `costs` mode: it
    returns the counters around each drain)."""
    marks = run_node_peer("bullmq-pg", {"jobs": jobs, "costs": levels}, peer_dsn(url))
    if isinstance(marks, str):
        return marks
    return {row: per_job(mark["before"], mark["after"], jobs) for row, mark in marks.items()}


def one_round(url: str, jobs: int, levels: list[int]) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    with fresh_database(url, "psyq_costs") as own:
        rows.update(asyncio.run(psyq_rows(own, jobs, levels)))
    for label, peer_rows in (("pgqueuer_costs", pgqueuer_rows), ("node_costs", node_rows)):
        with fresh_database(url, label) as own:
            peer = peer_rows(own, jobs, levels)
        if isinstance(peer, str):
            print(peer, file=sys.stderr)
        else:
            rows.update(peer)
    return rows


def table(rows: dict[str, dict[str, float]], count: int) -> str:
    columns = list(next(iter(rows.values())))
    lines = [
        f"| row (medians of {count}) | " + " | ".join(c.replace("_", " ") for c in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, figures in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{figures[c]:,}" for c in columns) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", default="10,100")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    rounds: list[dict[str, Any]] = []
    for number in range(1, args.rounds + 1):
        rounds.append(one_round(args.url, args.jobs, levels))
        print(json.dumps({"round": number, **rounds[-1]}), flush=True)
    print()
    print(table(row_medians(rounds), len(rounds)))


if __name__ == "__main__":
    main()
