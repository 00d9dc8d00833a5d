"""psyq benchmarks, side by side with peers measured in the same run on the same machine.

    python -m bench.run [--backend memory|sqlite|sqlite-durable|psyq|redis-cluster|URL ...]
                        [--jobs 20000]
                        [--peers PEER[,PEER...]|none] [--quick] [--loop asyncio|uvloop]

(from the repository's root; `make bench` runs it with bunqueue on the embedded stores).

Peers: bunqueue (Bun), bullmq (Node BullMQ), bullmq-pg (Node BullMQ 6 on its PostgreSQL
backend, postgresql:// backends), and Python peers each run from its own
virtualenv (bench/peers/<name>/.venv, made on first use from its requirements.txt):
bullmq-py, saq, arq (redis:// backends) and pgqueuer, procrastinate, bullmq-py-pg (bullmq
for Python's Postgres backend) (postgresql:// backends). Each backend gets one table: a
column per peer and a ratio column per peer (psyq vs that peer).

`--backend psyq` starts a `psyq server` (memory data) and measures the psyq:// client against
it, side by side with a bunqueue TCP server (memory, its per-client rate limit turned off)
started the same way; memory per job is then the server's resident memory. Node BullMQ is
the peer for redis:// URLs and pgqueuer (a Postgres job queue) for postgresql:// URLs, each
on the same server (pgqueuer from its own virtualenv, bench/peers/pgqueuer/.venv, made on
first use).

`--backend redis-cluster` starts its own redis-server and a local 3-primary Redis Cluster
and measures psyq (and each peer: `--peers bullmq6`) on both, side by side, with the CPU
per job of the client and of each node (bench/harness/cluster.py).

Workloads (the same on both sides): add one by one, add_bulk (batches of 1000), processing
N no-op jobs at concurrency 10 and 100, add-to-start latency p50/p99 at a steady 500 jobs/s,
and resident memory per waiting job. Prints one JSON line with every figure, then a table.
Figures are printed, never asserted; on Postgres each system gets a fresh database.

The parts, in bench/harness/: workloads.py (psyq's side of every row), launch.py (the
peers and the servers they run against), tables.py (the table, medians and ratios); this
module runs them in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psyq
from bench.harness.cluster import bench_cluster
from bench.harness.launch import PEERS, resolve_backend, run_peer, serve_backend
from bench.harness.pgdb import own_database, peer_database
from bench.harness.stores import drop_bench_queues
from bench.harness.tables import median_figures, medians_of, peer_notes, table
from bench.harness.workloads import run_psyq


def parse_peers(value: str) -> list[str]:
    """`--peers a,b,c` (or `none`) as a list of known peer names."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if names == ["none"]:
        return []
    unknown = [name for name in names if name not in PEERS]
    if unknown or not names:
        known = ", ".join([*PEERS, "none"])
        raise argparse.ArgumentTypeError(f"unknown peer(s) {unknown or value!r}; known: {known}")
    return names


LOOP_FACTORY: Any = None  # --loop uvloop: uvloop.new_event_loop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        action="append",
        help="memory, sqlite, sqlite-durable, psyq, redis-cluster or a URL; repeat for several "
        "(default: memory)",
    )
    parser.add_argument("--jobs", type=int, default=20000, help="jobs per bulk/processing run")
    parser.add_argument(
        "--peers",
        default="bunqueue",
        type=parse_peers,
        help=f"comma-separated peers, or none (known: {', '.join(PEERS)}; default bunqueue)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="psyq then the peers, this many times in turn; the table shows medians (1)",
    )
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="event loop of psyq's side and of the psyq server it starts (asyncio)",
    )
    args = parser.parse_args()
    os.environ["PSYQ_LOOP"] = args.loop  # `psyq server` (--backend psyq) reads it
    global LOOP_FACTORY
    if args.loop == "uvloop":
        import uvloop

        LOOP_FACTORY = uvloop.new_event_loop
    cfg = {
        "jobs": args.jobs,
        "single": 5000,
        "rate": 500,
        "seconds": 3,
        "memoryJobs": 100_000,
        "trees": 1000,
    }
    if args.quick:
        cfg.update(jobs=2000, single=500, seconds=0.5, memoryJobs=5000, trees=100)
    print(
        f"psyq {psyq.__version__}; Python {platform.python_version()}; {os.cpu_count()} CPUs; "
        f"{time.strftime('%Y-%m-%d')}; {args.loop} loop; config {cfg}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="psyq-bench-") as folder:
        for name in args.backend or ["memory"]:
            if name == "redis-cluster":  # its own servers, two tables: bench/harness/cluster.py
                bench_cluster(Path(folder), cfg, args.peers, max(1, args.rounds), LOOP_FACTORY)
                continue
            bench_backend(name, Path(folder), cfg, args.peers, max(1, args.rounds))
    return 0


def bench_backend(
    name: str, folder: Path, cfg: dict[str, Any], peers: list[str], rounds: int = 1
) -> None:
    """psyq, then each peer, `rounds` times in turn (paired runs: each round's ratios come
    from figures taken minutes apart); with several rounds the table shows each figure's
    median and each ratio's median with its range over the rounds."""
    url, mode, env = resolve_backend(name, folder)
    mine_runs: list[dict[str, Any]] = []
    peer_runs: dict[str, list[dict[str, Any] | str]] = {peer: [] for peer in peers}
    for round_no in range(1, rounds + 1):
        with serve_backend(url) as (served, server_pid), own_database(served, "psyq") as served:
            print(f"\n## {served}" + (f" (round {round_no} of {rounds})" if rounds > 1 else ""))
            with asyncio.Runner(loop_factory=LOOP_FACTORY) as runner:
                mine_runs.append(runner.run(run_psyq(served, cfg, server_pid)))
        if url.startswith(("redis://", "rediss://")):
            asyncio.run(drop_bench_queues(url))
        for peer in peers:
            with peer_database(env, peer) as peer_env:
                result = run_peer(peer, cfg, peer_env)
            peer_runs[peer].append(result)
            if isinstance(result, str):
                print(f"peer unavailable: {result}", file=sys.stderr, flush=True)
            else:
                print(f"peer: {peer} {result.get('version', '?')} ({mode})", flush=True)
        if rounds > 1:
            print(
                json.dumps(
                    {
                        "backend": served,
                        "round": round_no,
                        "psyq": mine_runs[-1],
                        **{peer: runs[-1] for peer, runs in peer_runs.items()},
                    }
                )
            )
    mine = medians_of(mine_runs)
    figures = {peer: median_figures(runs) for peer, runs in peer_runs.items()}
    print(json.dumps({"backend": served, "config": cfg, "rounds": rounds, "psyq": mine, **figures}))
    print(table(mine, figures or {"none": "not run (--peers none)"}, mine_runs, peer_runs))
    for note in peer_notes(figures):
        print(f"- {note}")
