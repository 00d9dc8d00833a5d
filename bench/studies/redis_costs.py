"""Where a job's time goes on redis://, per job, for psyq and Node BullMQ side by side.

    python -m bench.studies.redis_costs [--rows add,c10,c100] [--jobs 20000]
                                        [--peers bullmq6] [--url redis://...] [--profile FILE]
                                        [--groups N]

Each row runs once per side against one Redis server (by default a private `redis-server`
started here on a free port, no persistence, so nobody else's commands are counted), and
reads the counters around the measured part only (the queue is filled before):
- client: the process's CPU (user, and kernel: mostly socket calls) per job;
- server: Redis' own CPU per job (INFO cpu, user + sys: commands, parsing, sockets), the
  time inside commands (INFO commandstats: script calls, with the `redis.call`s they make
  counted inside them) and how many commands each job cost, listed per command;
- wire: the bytes Redis read and wrote per job (INFO stats; INFO's own replies included);
- wall: the measured part's elapsed time per job.
Figures move much less with the machine's load than jobs/s do (CPU and call counts, not
turns of a shared core). `--profile FILE` also writes psyq's cProfile stats (pstats).
`--groups N` puts job i of the add_bulk and cN rows in group i % N (BullMQ Pro's groups:
psyq only, the Node peers are not run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from redis import Redis

import psyq
from bench.harness.launch import PEERS
from bench.harness.processes import free_port, server_process
from bench.harness.workloads import fill, noop
from bench.peers.peerlib import Countdown

NODE = PEERS["bullmq"]


def server_counters(url: str) -> dict[str, Any]:
    client = Redis.from_url(url)
    try:
        cpu = client.info("cpu")
        stats = client.info("commandstats")
        net = client.info("stats")
    finally:
        client.close()
    commands = {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }
    return {
        "cpu": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
        "cmd": commands,
        "net": (int(net["total_net_input_bytes"]), int(net["total_net_output_bytes"])),
    }


def per_job(before: dict[str, Any], after: dict[str, Any], jobs: int) -> dict[str, Any]:
    """Server figures per job between two snapshots (INFO's own calls left out)."""
    calls: dict[str, float] = {}
    script_usec = 0
    for name, (n, usec) in after["cmd"].items():
        n0, usec0 = before["cmd"].get(name, (0, 0))
        if name in ("info", "ping", "client|setname", "client|info", "select"):
            continue
        if n - n0:
            calls[name] = (n - n0) / jobs
        if name in ("evalsha", "eval", "fcall"):
            script_usec += usec - usec0
    top_level = sum(calls.get(name, 0) for name in ("evalsha", "eval", "fcall"))
    return {
        "server_cpu_us": (after["cpu"] - before["cpu"]) * 1e6 / jobs,
        "script_us": script_usec / jobs,
        "script_calls": top_level,
        "bytes_in": (after["net"][0] - before["net"][0]) / jobs,  # to Redis (INFO's own included)
        "bytes_out": (after["net"][1] - before["net"][1]) / jobs,
        "calls": dict(sorted(calls.items(), key=lambda item: -item[1])),
    }


def bulk_entry(i: int, groups: int) -> dict[str, Any]:
    """Job i of the add_bulk row and of the fill: in group i % groups (0: no group)."""
    if not groups:
        return {"name": "x", "data": {"i": i}}
    return {"name": "x", "data": {"i": i}, "opts": {"group": {"id": i % groups}}}


async def psyq_row(url: str, row: str, jobs: int, measured: Any, groups: int = 0) -> float:
    """Run one row; `measured` is a context manager around the measured part."""
    async with psyq.Queue(f"costs-{row}-{os.getpid()}", connection=url) as queue:
        if row.startswith("c") and groups:
            for start in range(0, jobs, 1000):
                size = min(1000, jobs - start)
                await queue.add_bulk([bulk_entry(start + i, groups) for i in range(size)])
        elif row.startswith("c"):
            await fill(queue, jobs)
        else:
            await queue.add("warm", {})  # scripts loaded, connection open
        completions = Countdown(jobs)
        with measured:
            started = time.perf_counter()
            if row == "add":
                for i in range(jobs):
                    await queue.add("x", {"i": i})
            elif row == "add_bulk":  # the runner's row: batches of 1,000, dicts built inside
                for start in range(0, jobs, 1000):
                    size = min(1000, jobs - start)
                    await queue.add_bulk([bulk_entry(start + i, groups) for i in range(size)])
            elif row.startswith("gather"):  # N producers adding one by one at once
                producers = int(row.removeprefix("gather"))

                async def produce(count: int) -> None:
                    for i in range(count):
                        await queue.add("x", {"i": i})

                await asyncio.gather(*(produce(jobs // producers) for _ in range(producers)))
            else:
                worker = psyq.Worker(queue.name, noop, connection=url, concurrency=int(row[1:]))
                worker.on("completed", completions.hit)
                await completions.done.wait()
            wall = time.perf_counter() - started
        if row.startswith("c"):
            await worker.close()
        await queue.obliterate(force=True)
    return wall


@contextlib.contextmanager
def counted(url: str, into: dict[str, Any], profile: cProfile.Profile | None) -> Iterator[None]:
    before, times = server_counters(url), os.times()
    if profile is not None:
        profile.enable()
    try:
        yield
    finally:
        if profile is not None:
            profile.disable()
        into["times"] = [b - a for a, b in zip(times, os.times(), strict=False)]
        into["before"], into["after"] = before, server_counters(url)


def measure_psyq(
    url: str, row: str, jobs: int, profile: cProfile.Profile | None, groups: int = 0
) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    wall = asyncio.run(psyq_row(url, row, jobs, counted(url, seen, profile), groups))
    user, sys_ = seen["times"][0], seen["times"][1]
    return {
        "wall_us": wall * 1e6 / jobs,
        "client_user_us": user * 1e6 / jobs,
        "client_sys_us": sys_ * 1e6 / jobs,
        **per_job(seen["before"], seen["after"], jobs),
    }


def measure_node(url: str, package: str, row: str, jobs: int) -> dict[str, Any] | str:
    if row.startswith("gather"):
        return "not measured"
    env = {**os.environ, "REDIS_URL": url, "PEER_PACKAGE": package}
    command = ["node", "costs.mjs", json.dumps({"row": row, "jobs": jobs})]
    with subprocess.Popen(
        command, cwd=NODE, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            return f"{package} did not start"
        before = server_counters(url)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        after = server_counters(url)
        proc.wait(60)
    figures = json.loads(line)
    return {
        "version": figures["version"],
        "wall_us": figures["wall"] * 1e6 / jobs,
        "client_user_us": figures["user"] * 1e6 / jobs,
        "client_sys_us": figures["sys"] * 1e6 / jobs,
        **per_job(before, after, jobs),
    }


def show(row: str, side: str, f: dict[str, Any] | str) -> None:
    if isinstance(f, str):
        print(f"{row:8} {side:14} {f}")
        return
    calls = ", ".join(f"{name} {n:.2f}" for name, n in list(f["calls"].items())[:24])
    print(
        f"{row:8} {side:14} wall {f['wall_us']:6.1f}  client user {f['client_user_us']:5.1f}"
        f" sys {f['client_sys_us']:5.1f}  redis cpu {f['server_cpu_us']:5.1f}"
        f" in scripts {f['script_us']:5.1f}  scripts/job {f['script_calls']:.3f}"
        f"  commands/job {sum(f['calls'].values()):.1f}"
        f"  bytes/job in {f['bytes_in']:.0f} out {f['bytes_out']:.0f}\n{'':24}{calls}"
    )


@contextlib.contextmanager
def private_redis(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="psyq-costs-") as folder:
        command = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
        with server_process([*command, "--dir", folder], port):
            yield f"redis://127.0.0.1:{port}/0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", default="add,c10,c100", help="add, add_bulk, gatherN, cN (add,c10,c100)"
    )
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--peers", default="bullmq6", help="bullmq, bullmq6 or none")
    parser.add_argument("--url", help="a Redis server to use (default: a private one)")
    parser.add_argument("--profile", help="write psyq's cProfile stats here")
    parser.add_argument("--only-psyq", action="store_true")
    parser.add_argument("--groups", type=int, default=0, help="job i in group i %% N (psyq)")
    args = parser.parse_args()
    peers = [] if args.peers == "none" or args.groups else args.peers.split(",")
    profile = cProfile.Profile() if args.profile else None
    results: dict[str, Any] = {}
    with private_redis(args.url) as url:
        for row in args.rows.split(","):
            results[row] = {"psyq": measure_psyq(url, row, args.jobs, profile, args.groups)}
            show(row, "psyq", results[row]["psyq"])
            for peer in peers:
                results[row][peer] = measure_node(url, peer, row, args.jobs)
                show(row, peer, results[row][peer])
    if profile is not None:
        profile.dump_stats(args.profile)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
