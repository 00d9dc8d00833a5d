"""The single-add row alone, side by side with its floor (issue 24): rounds of

    python -m bench.studies.single_pairs [--rounds 5] [--adds 5000] [--tree PATH ...]
                                         [--no-bunqueue]

each round, one after the other: `bench/studies/pingpong.py` (the bare asyncio round trip),
then for each `--tree` (a psyq checkout; default: this one) a `psyq server --data memory`
of that tree on asyncio's loop and a client of the same tree making `--adds` sequential
`queue.add("x", {"i": i})` after 200 warm-up adds (the runner's row), then bunqueue's TCP
server and client doing the same (`bench/peers/bunqueue/single.ts`). Prints each figure per
round and the medians, in round trips per second and µs each. The order of the trees alternates
between rounds, so before/after pairs meet the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench.harness.figures import spread
from bench.harness.launch import PEERS, bunqueue_server, peer_bun
from bench.harness.processes import ROOT, free_port, psyq_server, server_process

PINGPONG = [sys.executable, "-m", "bench.studies.pingpong"]

CLIENT = r"""
import asyncio, sys, time, uuid
import psyq

async def main(url: str, adds: int) -> None:
    async with psyq.Queue("single-" + uuid.uuid4().hex[:8], connection=url) as queue:
        for i in range(200):
            await queue.add("x", {"i": i})
        started = time.perf_counter()
        for i in range(adds):
            await queue.add("x", {"i": i})
        print(adds / (time.perf_counter() - started))
        await queue.obliterate()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def pingpong(adds: int) -> float:
    port = free_port()
    with server_process([*PINGPONG, "server", str(port)], port, cwd=ROOT):
        out = subprocess.run(
            [*PINGPONG, "client", str(port), str(adds)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    return float(out.stdout.split()[0])


def psyq_single(tree: str, adds: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree, "PSYQ_LOOP": "asyncio"}
    with psyq_server(env=env, cwd=tempfile.gettempdir()) as (url, _):
        out = subprocess.run(
            [sys.executable, "-c", CLIENT, url, str(adds)],
            env=env,
            cwd=tempfile.gettempdir(),
            capture_output=True,
            text=True,
            check=True,
        )
    return float(out.stdout.strip())


def bunqueue_single(adds: int) -> float:
    bun = peer_bun("bunqueue")
    if isinstance(bun, str):
        raise SystemExit(bun)
    with bunqueue_server(bun) as (port, _):
        out = subprocess.run(
            [str(bun), "single.ts", json.dumps({"port": port, "single": adds})],
            cwd=PEERS["bunqueue"],
            capture_output=True,
            text=True,
            check=True,
        )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--adds", type=int, default=5000)
    parser.add_argument("--tree", action="append", help="a psyq checkout (default: this one)")
    parser.add_argument("--no-bunqueue", action="store_true")
    args = parser.parse_args()
    trees = args.tree or [str(ROOT)]
    figures: dict[str, list[float]] = {}
    for round_no in range(args.rounds):
        row = {"pingpong": pingpong(args.adds)}
        for tree in trees if round_no % 2 == 0 else trees[::-1]:
            row[f"psyq {tree}"] = psyq_single(tree, args.adds)
        if not args.no_bunqueue:
            row["bunqueue"] = bunqueue_single(args.adds)
        for name, value in row.items():
            figures.setdefault(name, []).append(value)
        load = os.getloadavg()[0]
        print(json.dumps({"round": round_no + 1, "load": round(load, 2), **row}), flush=True)
    for name, values in figures.items():
        median, low, high = spread(values)
        print(f"{name}: {median:,.0f}/s ({low:,.0f}-{high:,.0f}), {1e6 / median:.1f} µs each")


if __name__ == "__main__":
    main()
