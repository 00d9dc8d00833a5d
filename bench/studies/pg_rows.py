"""Issue 19's retention and scaling rows for `postgresql://` (BullMQ 6's layout), each
system in a fresh database of the server (created here, dropped at the end).

    python -m bench.studies.pg_rows retention [--jobs 20000] [--server postgresql://...]
    python -m bench.studies.pg_rows decay [--jobs 1000000] [--vacuum-every 0]
    python -m bench.studies.pg_rows scaling [--backlog 1000000] [--jobs 20000]
    add --private-server to any row: a throw-away cluster of the run (initdb's defaults,
    autovacuum on, as users run Postgres) instead of --server; --rounds N: medians of N runs

retention: processing at concurrency 100 with no retention option, removeOnComplete: 1000,
{age: 3600} and true, each in a fresh database; prints the rates and
each option's rate over the rate with none (issue 19: >= 0.8x, 0.8x, 0.7x).
decay: --jobs jobs with removeOnComplete: 1000 processed at concurrency 100 while they are
added in batches of 1,000 (a steady backlog of at most 20,000); the rate of the first and of
the last 10,000 (issue 19: last >= 0.9x first), the rate of the 10,000 before each tenth of
the run, and the buffers the database used per job over each tenth. A server running with
autovacuum off never vacuums: --vacuum-every N runs VACUUM ANALYZE on the schema's job and
event tables every N jobs, as autovacuum would.
scaling: processing 20,000 jobs at concurrency 100 from a queue with --backlog jobs already
waiting behind them, while another queue of the same schema holds --backlog more, then
the same with two worker processes (one Worker each) against the one database; the rate
of an empty schema first. With --vacuum-every N (any N > 0), VACUUM ANALYZE runs after the fills,
as autovacuum would. The take's plan is printed with EXPLAIN (ANALYZE, BUFFERS, WAL) so its
cost can be read off, and each one-process row's WAL, blocks read and server CPU per job
(what the load of a shared machine moves least).
Figures are printed, never asserted; one JSON line, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import time
import uuid
from typing import Any

import asyncpg

import psyq
from bench.harness.figures import spread
from bench.harness.pgdb import fresh_database, private_server
from bench.harness.processes import cpu_seconds
from bench.harness.workloads import fill, noop
from bench.peers.peerlib import BATCH

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
RETENTION: dict[str, Any] = {
    "none": None,
    "removeOnComplete: 1000": 1000,
    "removeOnComplete: {age: 3600}": {"age": 3600},
    "removeOnComplete: true": True,
}


class Clock:
    """Completion times, for rates over any stretch of the run."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.times: list[float] = []
        self.done = asyncio.Event()

    def hit(self, *_: Any) -> None:
        self.times.append(time.perf_counter())
        if len(self.times) >= self.target:
            self.done.set()

    def rate(self, first: int, last: int) -> float:
        """Jobs/s between completion `first` and completion `last` (0-based)."""
        return (last - first) / (self.times[last] - self.times[first])


async def process(url: str, name: str, count: int, concurrency: int = 100) -> float:
    return (await process_costs(url, name, count, concurrency))["rate"]


async def process_costs(
    url: str, name: str, count: int, concurrency: int = 100
) -> dict[str, float]:
    """Jobs/s, and what load moves least: WAL bytes, blocks read into shared buffers and
    server CPU µs per job (the CPU of the database's server processes, read from /proc
    when the server runs on this machine; NaN otherwise)."""
    clock = Clock(count)
    before = await server_costs(url)
    started = time.perf_counter()
    worker = psyq.Worker(name, noop, connection=url, concurrency=concurrency)
    worker.on("completed", clock.hit)
    await clock.done.wait()
    rate = count / (time.perf_counter() - started)
    after = await server_costs(url)
    await worker.close()
    return {"rate": rate, **{k: (after[k] - before[k]) / count for k in after}}


async def server_costs(url: str) -> dict[str, float]:
    """The server's WAL position, blocks read, and the CPU µs of the database's processes."""
    conn = await asyncpg.connect(url.split("?")[0])
    try:
        row = await conn.fetchrow(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal, blks_read,"
            " ARRAY(SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()) AS pids"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return {
        "wal_bytes": float(row["wal"]),
        "blocks_read": float(row["blks_read"]),
        "server_cpu_us": sum(_cpu_us(pid) for pid in row["pids"]),
    }


def _cpu_us(pid: int) -> float:
    """CPU µs of a server process on this host; NaN when it is not one of this host's."""
    try:
        return cpu_seconds(pid) * 1e6
    except OSError:
        return float("nan")


async def retention_row(url: str, jobs: int, keep: Any) -> float:
    opts = {} if keep is None else {"removeOnComplete": keep}
    async with psyq.Queue(f"rows-{uuid.uuid4().hex[:8]}", connection=url) as queue:
        await fill(queue, jobs, opts)
        return await process(url, queue.name, jobs)


def retention_rows(server: str, jobs: int) -> dict[str, float]:
    """Each option in a fresh database of its own (no option pays for another's rows)."""
    rates = {}
    for label, keep in RETENTION.items():
        with fresh_database(server + "?layout=bullmq", "rows") as url:
            rates[label] = asyncio.run(retention_row(url, jobs, keep))
    return rates


async def vacuum(url: str) -> None:
    conn = await asyncpg.connect(url.split("?")[0])
    try:
        await conn.execute("VACUUM ANALYZE bullmq.job")
        await conn.execute("VACUUM ANALYZE bullmq.event")
    finally:
        await conn.close()


async def decay_row(url: str, jobs: int, vacuum_every: int) -> dict[str, float]:
    opts = {"removeOnComplete": 1000}
    clock = Clock(jobs)
    async with psyq.Queue(f"decay-{uuid.uuid4().hex[:8]}", connection=url) as queue:
        await fill(queue, min(jobs, 20 * BATCH), opts)
        worker = psyq.Worker(queue.name, noop, connection=url, concurrency=100)
        worker.on("completed", clock.hit)
        added, vacuumed = min(jobs, 20 * BATCH), 0
        tenth = max(jobs // 10, 1)
        buffers = [await buffers_used(url)]  # at the start and after each tenth of the jobs
        while not clock.done.is_set():
            if added < jobs and added - len(clock.times) < 20 * BATCH:
                await fill(queue, min(BATCH, jobs - added), opts)
                added += min(BATCH, jobs - added)
            else:
                await asyncio.sleep(0.01)
            if vacuum_every and len(clock.times) - vacuumed >= vacuum_every:
                vacuumed = len(clock.times)
                await vacuum(url)
            if len(clock.times) >= len(buffers) * tenth and len(buffers) <= 10:
                buffers.append(await buffers_used(url))
        if len(buffers) <= 10:
            buffers.append(await buffers_used(url))
        await worker.close()
    window = min(10_000, jobs // 2)
    first = clock.rate(0, window - 1)
    last = clock.rate(jobs - window, jobs - 1)
    curve = {  # the rate of the 10,000 before each tenth of the run: a saw-tooth or a slope
        f"rate at {end:,}": clock.rate(end - window, end - 1)
        for end in range(jobs // 10, jobs + 1, jobs // 10)
        if end >= window
    }
    # buffers the database's sessions used (hit or read) per job over each tenth: what the
    # load moves least; the adds of the tenth's jobs are in it too (the server's counters lag
    # by up to a second)
    used = {
        f"buffers/job, tenth {n}": (buffers[n] - buffers[n - 1]) / tenth
        for n in range(1, len(buffers))
    }
    return {"first": first, "last": last, "last/first": last / first, **curve, **used}


async def buffers_used(url: str) -> float:
    """Shared buffers the database's sessions have hit or read so far."""
    conn = await asyncpg.connect(url.split("?")[0])
    try:
        row = await conn.fetchrow(
            "SELECT blks_hit + blks_read AS used FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return float(row["used"])


def worker_process(url: str, name: str, count: int, shared: Any) -> None:
    """One of the worker processes of the scaling row: processes until the two have
    completed `count` jobs between them, counted in shared memory (no query of the database
    while it is measured), and reports its own completions."""
    ready, go, finished, done, out = shared

    async def main() -> None:
        seen = 0

        def hit(*_: Any) -> None:
            nonlocal seen
            seen += 1
            with done.get_lock():
                done.value += 1
                if done.value >= count:
                    finished.set()

        worker = psyq.Worker(name, noop, connection=url, concurrency=100, autorun=False)
        worker.on("completed", hit)
        ready.set()
        go.wait()
        runner = asyncio.ensure_future(worker.run())
        while not finished.is_set():
            await asyncio.sleep(0.02)
        await worker.close()
        runner.cancel()
        out.put(seen)

    asyncio.run(main())


def two_processes(url: str, name: str, count: int) -> float:
    """Jobs/s of two worker processes (concurrency 100 each) completing `count` more jobs
    of queue `name` between them: from the start signal to the count-th completion."""
    ctx = multiprocessing.get_context("spawn")
    ready = [ctx.Event(), ctx.Event()]
    go, finished, done, out = ctx.Event(), ctx.Event(), ctx.Value("q", 0), ctx.Queue()
    procs = [
        ctx.Process(
            target=worker_process, args=(url, name, count, (ready[i], go, finished, done, out))
        )
        for i in range(2)
    ]
    for proc in procs:
        proc.start()
    for event in ready:
        event.wait()
    started = time.perf_counter()
    go.set()
    finished.wait()
    rate = count / (time.perf_counter() - started)
    results = [out.get() for _ in procs]
    print(f"two processes: {results} completions each", flush=True)
    for proc in procs:
        proc.join()
    return rate


async def explain_take(url: str, queue: str) -> str:
    """EXPLAIN (ANALYZE, BUFFERS, WAL) of the worker's statement taking 50 jobs, six times
    in one transaction that is rolled back; shown: the one that wrote the least WAL, and the
    slowest. Every 256th event id a statement trims its queue's events, and the first trim
    after another queue's fill deletes the queue's whole stream (the layout cuts by ids that
    one sequence hands every queue): a one-off, which the slowest shows."""
    from psyq.backends.postgres.statements import load_statements

    tokens = [uuid.uuid4().hex for _ in range(50)]
    args: tuple[Any, ...] = (queue, [], [], [], tokens, 30000, "x", False, [], None)
    sql = "EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF) " + load_statements()["fast.settle_take"]
    conn = await asyncpg.connect(url.split("?")[0], server_settings={"search_path": "bullmq"})
    plans: list[list[str]] = []
    try:
        async with conn.transaction():
            for _ in range(6):
                plans.append([" ".join(row[0].split()) for row in await conn.fetch(sql, *args)])
            raise _Rollback
    except _Rollback:
        pass
    finally:
        await conn.close()

    def wal(lines: list[str]) -> int:
        found = [line for line in lines[1:3] if line.startswith("WAL: records=")]
        return int(found[0].split("=")[1].split()[0]) if found else 0

    def took(lines: list[str]) -> float:
        return float(lines[-1].split()[2])  # "Execution Time: N ms"

    quiet = min(plans, key=wal)
    shown = [line for line in quiet[1:3] if line.startswith(("Buffers", "WAL"))]
    shown += [line for line in quiet if "job_ready_idx" in line or "Execution Time" in line]
    return "; ".join([*shown, f"slowest of six: {max(map(took, plans)):.1f} ms"])


class _Rollback(Exception):
    pass


def costed(figures: dict[str, Any], label: str, costs: dict[str, float]) -> None:
    figures[label] = costs["rate"]
    figures[f"{label}, per job"] = (
        f"WAL {costs['wal_bytes']:,.0f} B, {costs['blocks_read']:.2f} blocks read, "
        f"server CPU {costs['server_cpu_us']:,.0f} µs"
    )


async def scaling_rows(url: str, backlog: int, jobs: int, settle: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    async with psyq.Queue(f"empty-{uuid.uuid4().hex[:8]}", connection=url) as queue:
        await fill(queue, jobs)
        figures["take plan, empty schema"] = await explain_take(url, queue.name)
        costed(figures, "empty schema, 1 process", await process_costs(url, queue.name, jobs))
    name = f"deep-{uuid.uuid4().hex[:8]}"
    async with (
        psyq.Queue(name, connection=url) as queue,
        psyq.Queue(f"other-{uuid.uuid4().hex[:8]}", connection=url) as other,
    ):
        await fill(queue, jobs + backlog)
        await fill(other, backlog)
        if settle:  # what autovacuum does after the fills (the server may run without it)
            await vacuum(url)
        figures["take plan, with the backlog"] = await explain_take(url, name)
        label = f"{backlog:,} waiting + {backlog:,} in another queue, 1 process"
        costed(figures, label, await process_costs(url, name, jobs))
    figures["the same, 2 processes"] = await asyncio.to_thread(two_processes, url, name, 2 * jobs)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row", choices=("retention", "decay", "scaling"))
    parser.add_argument("--server", default=SERVER, help="a database URL of the server")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--vacuum-every", type=int, default=0)
    parser.add_argument("--private-server", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="medians of N runs of the row")
    args = parser.parse_args()
    print(f"psyq {psyq.__version__}; {time.strftime('%Y-%m-%d %H:%M:%S')}; {args}", flush=True)
    if args.private_server:
        with private_server() as server:
            rounds = [run_row(args, server) for _ in range(args.rounds)]
    else:
        rounds = [run_row(args, args.server) for _ in range(args.rounds)]
    show(medians_shown(rounds) if args.rounds > 1 else rounds[0])
    return 0


def run_row(args: argparse.Namespace, server: str) -> dict[str, Any]:
    if args.row == "retention":
        figures: dict[str, Any] = retention_rows(server, args.jobs or 20000)
        base = figures["none"]
        figures.update({f"{k} vs none": v / base for k, v in list(figures.items())})
    else:
        with fresh_database(server + "?layout=bullmq", "rows") as url:
            if args.row == "decay":
                figures = asyncio.run(decay_row(url, args.jobs or 1_000_000, args.vacuum_every))
            else:
                figures = asyncio.run(
                    scaling_rows(url, args.backlog, args.jobs or 20000, args.vacuum_every > 0)
                )
    print(json.dumps(figures), flush=True)
    return figures


def medians_shown(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the rounds with its range; other values from the last round."""
    merged: dict[str, Any] = {}
    for key, last in rounds[-1].items():
        values = [r[key] for r in rounds if isinstance(r.get(key), (int, float))]
        if not isinstance(last, (int, float)) or len(values) < len(rounds):
            merged[key] = last
            continue
        middle, low, high = spread(values)
        merged[key] = f"{middle:,.2f} ({low:,.2f}-{high:,.2f})"
    return merged


def show(figures: dict[str, Any]) -> None:
    for key, value in figures.items():
        shown = f"{value:,.2f}" if isinstance(value, float) else str(value)
        print(f"| {key} | {shown} |")


if __name__ == "__main__":
    sys.exit(main())
