"""`--backend redis-cluster`: the Redis Cluster table (issue 55). The runner starts one
redis-server and a local cluster of 3 primaries (bench/harness/redis_nodes.py), then per
round runs psyq's Redis rows on each, then each peer (Node BullMQ 6: `--peers bullmq6`) on
each, and prints two tables: the rows side by side (cluster vs one server, psyq vs the
peer on each), and the CPU per job of the client and of each Redis node (the node serving
the row's queue, and all nodes), with jobs per CPU-second of every process.

Each row's queue carries its own hash tag (a flow's two queues share one), so on the
cluster each row runs on the node of its slot: the rows measure what a call costs through
the cluster, not how far 3 nodes scale (this host has 2 cores)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psyq
from bench.harness.launch import run_peer
from bench.harness.processes import cpu_seconds
from bench.harness.redis_nodes import RedisNodes, redis_nodes
from bench.harness.tables import ROWS, fmt, medians_of, paired_ratios, pick
from bench.harness.workloads import drain, fill, flows, fresh, latency

Cost = dict[str, Any]  # {"client_us": float, "redis_us": [float per node]}

RATE_ROWS = [row for row in ROWS if row[1] != "bytes_per_waiting_job"]  # no memory row
CPU_ROWS = [("add one by one", "add_single"), ("add_bulk", "add_bulk"), ("c10", "c10")]
CPU_ROWS += [("c100", "c100"), ("flows (add + run, per job)", "flows")]


class Meter:
    """CPU seconds of this process and of each Redis node, read together."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def read(self) -> list[float]:
        return [cpu_seconds("self"), *(cpu_seconds(pid) for pid in self.pids)]

    @staticmethod
    def cost(before: list[float], after: list[float], jobs: int) -> Cost:
        used = [(b - a) / jobs * 1e6 for a, b in zip(before, after, strict=True)]
        return {"client_us": used[0], "redis_us": used[1:]}


async def timed(meter: Meter, jobs: int, run: Callable[[], Awaitable[Any]]) -> tuple[float, Cost]:
    """Jobs/s of `await run()` and its CPU per job."""
    before, started = meter.read(), time.perf_counter()
    await run()
    rate = jobs / (time.perf_counter() - started)
    return rate, meter.cost(before, meter.read(), jobs)


async def single(url: str, count: int, meter: Meter) -> tuple[float, Cost]:
    async with psyq.Queue(fresh("single"), connection=url) as queue:

        async def adds() -> None:
            for i in range(count):
                await queue.add("x", {"i": i})

        figures = await timed(meter, count, adds)
        await queue.obliterate()
    return figures


async def bulk(url: str, count: int, meter: Meter) -> tuple[float, Cost]:
    async with psyq.Queue(fresh("bulk"), connection=url) as queue:
        figures = await timed(meter, count, lambda: fill(queue, count))
        await queue.obliterate()
    return figures


async def processing(url: str, count: int, concurrency: int, meter: Meter) -> tuple[float, Cost]:
    """The drain of `count` waiting jobs (the fill before it not counted)."""
    reads: list[list[float]] = []

    async def probe() -> None:
        reads.append(meter.read())

    async with psyq.Queue(fresh(f"c{concurrency}"), connection=url) as queue:
        await fill(queue, count)
        seconds = await drain(url, queue, count, concurrency, probe)
        await queue.obliterate()
    return count / seconds, meter.cost(reads[0], reads[1], count)


async def run_metered(nodes: RedisNodes, cfg: dict[str, Any]) -> dict[str, Any]:
    """psyq's Redis rows on `nodes`, each with its CPU per job (but the latency row)."""
    url, meter = nodes.url, Meter(nodes.pids)
    figures: dict[str, Any] = {"cpu": {}}
    rows: list[tuple[str, Awaitable[tuple[float, Cost]]]] = [
        ("add_single", single(url, cfg["single"], meter)),
        ("add_bulk", bulk(url, cfg["jobs"], meter)),
        ("c10", processing(url, cfg["jobs"], 10, meter)),
        ("c100", processing(url, cfg["jobs"], 100, meter)),
    ]
    for key, row in rows:
        figures[key], figures["cpu"][key] = await row
    trees: dict[str, float] = {}

    async def run_flows() -> None:
        trees.update(await flows(url, cfg["trees"]))

    _, figures["cpu"]["flows"] = await timed(meter, cfg["trees"] * 11, run_flows)
    figures["flows"] = trees
    figures["latency"] = await latency(url, cfg["rate"], cfg["seconds"])
    return figures


Runs = dict[str, list[dict[str, Any] | str]]  # side ("psyq one", ...) -> each round's


def bench_cluster(
    folder: Path, cfg: dict[str, Any], peers: list[str], rounds: int, loop: Any = None
) -> None:
    """psyq on one server and on the cluster, then each peer on each, `rounds` times; the
    two sides take turns at going first."""
    runs: Runs = {}
    with redis_nodes(folder, False) as one, redis_nodes(folder, True) as three:
        sides = {"one server": one, "cluster": three}
        print(f"\n## one server {one.url}; cluster of {len(three.ports)} primaries {three.url}")
        for round_no in range(1, rounds + 1):
            order = list(sides.items())
            if round_no % 2 == 0:  # the sides take turns at going first: order is not cost
                order.reverse()
            for label, nodes in order:
                with asyncio.Runner(loop_factory=loop) as runner:
                    mine = runner.run(run_metered(nodes, cfg))
                runs.setdefault(f"psyq {label}", []).append(mine)
                print(json.dumps({"round": round_no, "side": f"psyq {label}", **mine}), flush=True)
            for peer in peers:
                for label, nodes in order:
                    theirs = peer_run(peer, cfg, nodes)
                    runs.setdefault(f"{peer} {label}", []).append(theirs)
                    side = {"round": round_no, "side": f"{peer} {label}", "figures": theirs}
                    print(json.dumps(side), flush=True)
    print(rate_table(runs, peers))
    print()
    print(cpu_table(runs, peers))


def peer_run(peer: str, cfg: dict[str, Any], nodes: RedisNodes) -> dict[str, Any] | str:
    """The peer's figures on `nodes` with the CPU of each node (no memory row: 1,000 jobs)."""
    env = {**nodes.peer_env(), "REDIS_PIDS": ",".join(map(str, nodes.pids))}
    return run_peer(peer, {**cfg, "memoryJobs": 1000}, env)


def finished(runs: list[dict[str, Any] | str]) -> list[dict[str, Any]]:
    return [run for run in runs if not isinstance(run, str)]


def rate_table(runs: Runs, peers: list[str]) -> str:
    """Each rate row: psyq on one server and on the cluster (cluster vs one, paired by
    round), then per peer its figure on each and psyq vs it on the same side."""
    header = ["workload", "psyq, one server", "psyq, cluster", "cluster vs one"]
    for peer in peers:
        header += [f"{peer}, one server", f"{peer}, cluster", "psyq vs it (one)"]
        header += ["psyq vs it (cluster)"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    one, three = runs["psyq one server"], runs["psyq cluster"]
    medians = {side: medians_of(finished(done)) for side, done in runs.items() if finished(done)}
    for label, key, higher in RATE_ROWS:
        cells = [label, cell(medians, "psyq one server", key), cell(medians, "psyq cluster", key)]
        cells.append(paired(three, one, key, higher))
        for peer in peers:
            cells += [cell(medians, f"{peer} {side}", key) for side in ("one server", "cluster")]
            cells.append(paired(one, runs[f"{peer} one server"], key, higher))
            cells.append(paired(three, runs[f"{peer} cluster"], key, higher))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell(medians: dict[str, dict[str, Any]], side: str, key: str) -> str:
    value = pick(medians[side], key) if side in medians else None
    return "n/a" if value is None else fmt(value)


def paired(mine: list[Any], theirs: list[Any], key: str, higher: bool) -> str:
    if len(mine) != len(theirs) or any(isinstance(run, str) for run in (*mine, *theirs)):
        return "n/a"
    if len(mine) == 1:
        a, b = pick(mine[0], key), pick(theirs[0], key)
        if not (a and b):
            return "n/a"
        return f"{(a / b if higher else b / a):.2f}x"
    return paired_ratios(mine, theirs, key, higher)


def cpu_of(runs: list[dict[str, Any] | str], key: str) -> tuple[float, float, float] | None:
    """Medians over the rounds of (client µs, serving node's µs, all nodes' µs) per job."""
    costs = [run["cpu"][key] for run in finished(runs) if key in run.get("cpu", {})]
    if not costs:
        return None
    client = statistics.median(cost["client_us"] for cost in costs)
    node = statistics.median(max(cost["redis_us"]) for cost in costs)
    total = statistics.median(sum(cost["redis_us"]) for cost in costs)
    return client, node, total


def cpu_table(runs: Runs, peers: list[str]) -> str:
    """CPU per job (µs) of the client and of Redis, one server vs cluster, per system; and
    jobs per CPU-second of every process (client + every Redis node)."""
    systems = ["psyq", *peers]
    header = ["row (µs of CPU per job)"]
    for system in systems:
        header += [f"{system} client: one / cluster", f"{system} Redis: one / cluster node"]
        header += [f"{system} jobs per CPU-s, all processes: one / cluster"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for label, key in CPU_ROWS:
        cells = [label]
        for system in systems:
            one = cpu_of(runs.get(f"{system} one server", []), key)
            three = cpu_of(runs.get(f"{system} cluster", []), key)
            cells += cpu_cells(one, three)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpu_cells(
    one: tuple[float, float, float] | None, three: tuple[float, float, float] | None
) -> list[str]:
    if one is None or three is None:
        return ["n/a", "n/a", "n/a"]
    client = f"{one[0]:.1f} / {three[0]:.1f} ({three[0] / one[0]:.2f}x)"
    node = f"{one[1]:.1f} / {three[1]:.1f} ({three[1] / one[1]:.2f}x)"
    per_cpu_s = f"{1e6 / (one[0] + one[2]):,.0f} / {1e6 / (three[0] + three[2]):,.0f}"
    return [client, node, per_cpu_s]
