"""Groups beside plain jobs on one store: add, processing, memory and fairness.

    python -m bench.studies.groups [--url memory:// ...] [--peers bunqueue] [--rounds 3]
                                   [--jobs 20000] [--heavy 100000] [--waiting 200000]
                                   [--rows add,processing,memory,fairness] [--fresh-database]

`--url` may be given more than once; `--url psyq` starts a `psyq server` (memory data) for
the run. With `--peers bunqueue`, each round also runs bench/peers/bunqueue/groups.ts (the
same rows with bunqueue's job groups): embedded beside memory://, its TCP server (started
per round) beside psyq://, and the medians gain the psyq/bunqueue ratios. `--rows` runs
some of the rows; `--fresh-database` runs each processing row on a postgresql:// URL in a
database made for it (tables Postgres has no statistics for, and no dead rows of the rows
before, as in a new deployment with autovacuum off).

Rows (each round runs plain then grouped, in this process, on a fresh queue; 60-byte data):
- add one by one / add_bulk (jobs/s): `--jobs` jobs, plain, then each in one of 10 groups.
- processing c10 / c100 (jobs/s): `--jobs` jobs added, then a worker at that concurrency
  runs them all; plain, then with 10 groups and with 10,000 groups (round-robin).
- memory per waiting job (bytes, memory:// only): resident memory grown by `--waiting` waiting
  jobs, plain and grouped (10,000 groups), and what an emptied group leaves (0 expected).
- fairness: one group holds 100,000 jobs (`--heavy`), then 100 groups add 10 jobs each; a
  worker at c10 runs until every light job is done: p99 of a light job's add-to-start (ms)
  and the share of light jobs done among the first 1,000 jobs taken after they arrived.
Prints one JSON line per round and side, then per side the medians with the grouped/plain
ratios, and psyq/bunqueue for each row (above 1 is psyq ahead on the jobs/s and light-share
rows; below 1 is psyq ahead on the bytes and ms rows).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import time
import uuid
from typing import Any

import psyq
from bench.harness.launch import bunqueue_server, peer_bun, run_peer_command, serve_backend
from bench.harness.pgdb import own_database
from bench.harness.processes import rss_bytes

DATA = {"to": "someone@example.com", "template": "welcome", "n": 12345}  # ~60 bytes as JSON


def entries(count: int, groups: int, first: int = 0) -> list[dict[str, Any]]:
    """add_bulk entries for jobs first .. first + count - 1; job i in group i % groups (0
    groups: plain), so chunks added in turn fill every group, as bunqueue's side does."""
    if not groups:
        return [{"name": "j", "data": DATA} for _ in range(count)]
    return [
        {"name": "j", "data": DATA, "opts": {"group": {"id": i % groups}}}
        for i in range(first, first + count)
    ]


async def add_rates(url: str, count: int) -> dict[str, float]:
    found = {}
    for label, groups in (("plain", 0), ("grouped", 10)):
        async with psyq.Queue(f"g-add-{uuid.uuid4().hex[:8]}", connection=url) as queue:
            started = time.perf_counter()
            for entry in entries(count // 4, groups):
                await queue.add(entry["name"], entry["data"], **entry.get("opts", {}))
            found[f"add {label}"] = count // 4 / (time.perf_counter() - started)
            started = time.perf_counter()
            for start in range(0, count, 1000):
                await queue.add_bulk(entries(min(1000, count - start), groups, start))
            found[f"add_bulk {label}"] = count / (time.perf_counter() - started)
            await queue.obliterate(force=True)
    return found


async def processing_rate(url: str, count: int, concurrency: int, groups: int) -> float:
    name = f"g-run-{uuid.uuid4().hex[:8]}"
    async with psyq.Queue(name, connection=url) as queue:
        for start in range(0, count, 1000):
            await queue.add_bulk(entries(min(1000, count - start), groups, start))
        done = asyncio.Event()
        seen = 0

        async def work(job: psyq.Job) -> None:  # async as bunqueue's (a plain def runs in a thread)
            nonlocal seen
            seen += 1
            if seen >= count:
                done.set()

        started = time.perf_counter()
        async with psyq.Worker(name, work, connection=url, concurrency=concurrency):
            await done.wait()
            rate = count / (time.perf_counter() - started)  # as bunqueue's: before the close
        await queue.obliterate(force=True)
    return rate


async def memory_per_job(count: int) -> dict[str, float]:
    found: dict[str, float] = {}
    for label, groups in (("plain", 0), ("grouped", 10_000)):
        gc.collect()
        before = rss_bytes()
        async with psyq.Queue(f"g-mem-{uuid.uuid4().hex[:8]}", connection="memory://") as queue:
            for start in range(0, count, 1000):
                await queue.add_bulk(entries(min(1000, count - start), groups, start))
            gc.collect()
            found[f"bytes per waiting job {label}"] = (rss_bytes() - before) / count
            if groups:
                await queue.drain()
                found["groups left after drain"] = await queue.get_groups_count()
            await queue.obliterate(force=True)
    return found


async def fairness(url: str, heavy: int) -> dict[str, float]:
    name = f"g-fair-{uuid.uuid4().hex[:8]}"
    light = {f"light-{g}-{i}" for g in range(100) for i in range(10)}
    async with psyq.Queue(name, connection=url) as queue:
        for start in range(0, heavy, 1000):
            batch = [{"name": "heavy", "data": DATA, "opts": {"group": {"id": "heavy"}}}] * min(
                1000, heavy - start
            )
            await queue.add_bulk(batch)
        order: list[str] = []
        waits: list[float] = []
        done = asyncio.Event()

        async def work(job: psyq.Job) -> None:
            order.append(job.name)
            if job.name != "heavy":
                waits.append((job.processed_on or 0) - job.timestamp)
                if len(waits) == len(light):
                    done.set()

        async with psyq.Worker(name, work, connection=url, concurrency=10):
            for g in range(100):
                group = {"id": f"light-{g}"}
                await queue.add_bulk(
                    [{"name": f"light-{g}-{i}", "opts": {"group": group}} for i in range(10)]
                )
            arrived = len(order)
            await done.wait()
        first = order[arrived : arrived + 1000]
        await queue.obliterate(force=True)
    waits.sort()
    return {
        "light add-to-start p99 ms": waits[int(len(waits) * 0.99) - 1],
        "light share of first 1000": sum(1 for n in first if n != "heavy") / max(1, len(first)),
    }


ROWS = ("add", "processing", "memory", "fairness")


def row_url(url: str, args: argparse.Namespace) -> contextlib.AbstractContextManager[str]:
    """Where a processing row runs: `url`, or with `--fresh-database` on a Postgres server
    a database made for the row."""
    return own_database(url, "groups") if args.fresh_database else contextlib.nullcontext(url)


def one_round(url: str, args: argparse.Namespace) -> dict[str, float]:
    """The rows of `args.rows` once on `url`; with `--fresh-database`, each processing row
    on a Postgres server in a database made for it."""
    row: dict[str, float] = {}
    if "add" in args.rows:
        row.update(asyncio.run(add_rates(url, args.jobs)))
    if "processing" in args.rows:
        for concurrency in (10, 100):
            for groups in (0, 10, 10_000):
                label = f"c{concurrency} " + (f"{groups} groups" if groups else "plain")
                with row_url(url, args) as target:
                    row[label] = asyncio.run(
                        processing_rate(target, args.jobs, concurrency, groups)
                    )
    if "memory" in args.rows and url.startswith("memory:"):
        row.update(asyncio.run(memory_per_job(args.waiting)))
    if "fairness" in args.rows:
        row.update(asyncio.run(fairness(url, args.heavy)))
    return row


def peer_round(url: str, args: argparse.Namespace) -> dict[str, float]:
    """One round of bench/peers/bunqueue/groups.ts: embedded beside memory://, its TCP
    server beside psyq:// (started for the round); a clear error when it cannot run."""
    bun = peer_bun("bunqueue")
    if isinstance(bun, str):
        raise RuntimeError(bun)
    cfg: dict[str, Any] = {"jobs": args.jobs, "heavy": args.heavy, "waiting": args.waiting}
    with contextlib.ExitStack() as stack:
        if not url.startswith("memory:"):
            port, _pid = stack.enter_context(bunqueue_server(bun))
            cfg["port"] = port
        found = run_peer_command("bunqueue", [str(bun), "groups.ts", json.dumps(cfg)], {})
    if isinstance(found, str):
        raise RuntimeError(found)
    return {key: value for key, value in found.items() if isinstance(value, (int, float))}


def ratios(medians: dict[str, float]) -> dict[str, float]:
    """grouped / plain for each pair of rows."""
    pairs = {"add grouped": "add plain", "add_bulk grouped": "add_bulk plain"}
    for concurrency in (10, 100):
        for groups in (10, 10_000):
            pairs[f"c{concurrency} {groups} groups"] = f"c{concurrency} plain"
    pairs["bytes per waiting job grouped"] = "bytes per waiting job plain"
    return {f"{a} / {b}": medians[a] / medians[b] for a, b in pairs.items() if b in medians}


def versus(psyq_side: dict[str, float], peer: dict[str, float]) -> dict[str, float]:
    """psyq / bunqueue for each row both sides measured."""
    return {key: psyq_side[key] / peer[key] for key in psyq_side if peer.get(key)}


def summary(rows: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per side: medians and grouped/plain ratios; per backend with a peer: psyq/bunqueue."""
    out: dict[str, Any] = {}
    for side, found in rows.items():
        medians = {key: statistics.median(row[key] for row in found) for key in found[0]}
        out[side] = {"median": medians, "grouped / plain": ratios(medians)}
    for side in rows:
        peer = out.get(f"bunqueue beside {side}")
        if peer is not None:
            out[side]["psyq / bunqueue"] = versus(out[side]["median"], peer["median"])
    return out


def run(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    rows: dict[str, list[dict[str, float]]] = {}
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(serve_backend(name))[0] for name in args.url]
        for number in range(args.rounds):
            for url in urls:
                found = {url: one_round(url, args)}
                if "bunqueue" in args.peers:
                    found[f"bunqueue beside {url}"] = peer_round(url, args)
                for side, row in found.items():
                    rows.setdefault(side, []).append(row)
                    print(json.dumps({"round": number + 1, "side": side, **row}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", action="append", help="memory:// (default), psyq, a URL")
    parser.add_argument("--peers", action="append", default=[], choices=["bunqueue"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--heavy", type=int, default=100_000)
    parser.add_argument("--waiting", type=int, default=200_000)
    parser.add_argument("--rows", default=",".join(ROWS), help="some of " + ",".join(ROWS))
    parser.add_argument(
        "--fresh-database",
        action="store_true",
        help="on postgresql://, each processing row in a database made for it",
    )
    args = parser.parse_args()
    args.rows = args.rows.split(",")
    unknown = sorted(set(args.rows) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows {unknown}: choose from {', '.join(ROWS)}")
    args.url = args.url or ["memory://"]
    print(json.dumps(summary(run(args)), indent=1))


if __name__ == "__main__":
    main()
