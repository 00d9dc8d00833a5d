"""The single-add row alone, side by side with its floor (issue 24): rounds of

    python bench/single_pairs.py [--rounds 5] [--adds 5000] [--tree PATH ...] [--no-bunqueue]

each round, one after the other: `bench/pingpong.py` (the bare asyncio round trip), then for
each `--tree` (a psyq checkout; default: this one) a `psyq server --data memory` of that tree
on asyncio's loop and a client of the same tree making `--adds` sequential
`queue.add("x", {"i": i})` after 200 warm-up adds (bench/run.py's row), then bunqueue's TCP
server and client doing the same (`peers/bunqueue/single.ts`). Prints each figure per round
and the medians, in round trips per second and µs each. The order of the trees alternates
between rounds, so before/after pairs meet the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from launch import PEERS, free_port, peer_bun, server_process  # noqa: E402

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
    command = [sys.executable, str(HERE / "pingpong.py"), "server", str(port)]
    with server_process(command, port):
        out = subprocess.run(
            [sys.executable, str(HERE / "pingpong.py"), "client", str(port), str(adds)],
            capture_output=True,
            text=True,
            check=True,
        )
    return float(out.stdout.split()[0])


def psyq_single(tree: str, adds: int) -> float:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": tree, "PSYQ_LOOP": "asyncio"}
    command = [sys.executable, "-m", "psyq", "server", "--port", str(port), "--data", "memory"]
    with server_process(command, port, env=env, cwd=tempfile.gettempdir()):
        out = subprocess.run(
            [sys.executable, "-c", CLIENT, f"psyq://127.0.0.1:{port}", str(adds)],
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
    folder = PEERS["bunqueue"]
    port = free_port()
    command = [str(bun), "node_modules/bunqueue/dist/cli/index.js", "start", "--host"]
    command += ["127.0.0.1", "--tcp-port", str(port), "--http-port", str(free_port())]
    env = {**os.environ, "RATE_LIMIT_MAX_REQUESTS": str(2**31 - 1)}
    with server_process(command, port, cwd=folder, env=env):
        out = subprocess.run(
            [str(bun), "single.ts", json.dumps({"port": port, "single": adds})],
            cwd=folder,
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
    trees = args.tree or [str(HERE.parent)]
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
        median = statistics.median(values)
        low, high = min(values), max(values)
        print(f"{name}: {median:,.0f}/s ({low:,.0f}-{high:,.0f}), {1e6 / median:.1f} µs each")


if __name__ == "__main__":
    main()
