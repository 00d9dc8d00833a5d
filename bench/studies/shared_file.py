"""A process that does not own a `sqlite:///` file (it reaches the owner's engine over the
owner's local socket) against a psyq:// client of `psyq server` over TCP (issue 43).

    python -m bench.studies.shared_file [--jobs 5000] [--rounds 3]
    python -m bench.studies.shared_file --handover [--rounds 3]
    python -m bench.studies.shared_file --takeover [--jobs 5000] [--rounds 3]

Each side: one process holds the file (an idle app process that opened it, or `psyq server
--data F`), and this process adds jobs through `sqlite:///F` or `psyq://127.0.0.1:PORT`.
Rows: single add (one await at a time), add_bulk (batches of 100), c10 (10 tasks adding one
at a time). Prints jobs/s, the median of `--rounds`, each round on a fresh queue.

`--handover`: the owner's graceful exit. An owner process and two peer processes of one
file each add durable jobs one at a time and run them with a Worker; the owner gets SIGTERM
(it closes its worker and queue, as an app does) and exits. Per round: the longest gap
between two acknowledged adds of a peer around the exit (the stall), the adds that failed
with `psyq.ConnectionError`, and the owner's close time. Prints the median of `--rounds`.

`--takeover`: single add (jobs/s) of one Queue of this process while another process owns
the file, then after that owner exited and this process took the file over, against a
Queue of a process that opened the file first (the embedded engine).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import psyq
from bench.harness.processes import free_port, psyq_server_command, stop, wait_for_port

HOLD = """
import asyncio, sys, psyq
async def main() -> None:
    async with psyq.Queue("held", connection=sys.argv[1]) as queue:
        await queue.count()
        print("ready", flush=True)
        await asyncio.sleep(3600)
asyncio.run(main())
"""


async def single(queue: psyq.Queue, jobs: int) -> None:
    for i in range(jobs):
        await queue.add("x", {"i": i})


async def bulk(queue: psyq.Queue, jobs: int) -> None:
    for start in range(0, jobs, 100):
        await queue.add_bulk([{"name": "x", "data": {"i": i}} for i in range(start, start + 100)])


async def c10(queue: psyq.Queue, jobs: int) -> None:
    await asyncio.gather(*(single(queue, jobs // 10) for _ in range(10)))


ROWS: dict[str, Callable[[psyq.Queue, int], Awaitable[None]]] = {
    "single add": single,
    "add_bulk (100)": bulk,
    "c10": c10,
}


async def rate(url: str, row: Callable[[psyq.Queue, int], Awaitable[None]], jobs: int) -> float:
    async with psyq.Queue(f"bench-{uuid.uuid4().hex[:8]}", connection=url) as queue:
        await queue.count()  # connected before the clock starts
        started = time.perf_counter()
        await row(queue, jobs)
        return jobs / (time.perf_counter() - started)


def start(command: list[str], ready: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if ready not in line:
        proc.kill()
        raise SystemExit(f"{command[:4]} did not start: {line!r}")
    return proc


def holders(folder: Path) -> dict[str, tuple[str, list[str], str]]:
    """Per side: the URL this process uses, and the command of the process holding it."""
    shared = folder / "shared.db"
    port = free_port()
    return {
        "sqlite:/// (not the owner)": (
            f"sqlite:///{shared}",
            [sys.executable, "-c", HOLD, f"sqlite:///{shared}"],
            "ready",
        ),
        "psyq:// (psyq server)": (
            f"psyq://127.0.0.1:{port}",
            psyq_server_command(port, str(folder / "server.db")),
            "",
        ),
    }


async def measure(urls: list[str], jobs: int, rounds: int) -> list[dict[str, float]]:
    """Per URL, each row's median; the sides alternate within each round, so a change in
    the machine's load falls on both."""
    runs: list[dict[str, list[float]]] = [{name: [] for name in ROWS} for _ in urls]
    for _ in range(rounds):
        for name, row in ROWS.items():
            for url, figures in zip(urls, runs, strict=True):
                figures[name].append(await rate(url, row, jobs))
    return [{name: statistics.median(got) for name, got in fig.items()} for fig in runs]


def hold(url: str, command: list[str], ready: str) -> subprocess.Popen[str]:
    """Start the process that holds `url`'s store; return once it serves (`psyq server`
    prints to its log, not stdout: then once its port answers)."""
    if ready:
        return start(command, ready)
    proc = subprocess.Popen(command, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_for_port(int(url.rsplit(":", 1)[1]), proc, timeout=15)
    except RuntimeError as exc:
        stop(proc)
        raise SystemExit(f"psyq server did not listen on {url}: {exc}") from None
    return proc


# One process of the handover round: adds durable jobs one at a time and runs them;
# prints `ok T` / `fail T` per add (T: the monotonic clock, one clock for the host on
# Linux); on SIGTERM prints `closing T`, closes as an app does, prints `closed T`.
LOAD = """
import asyncio, signal, sys, time, psyq
from psyq.backends.sqlite.database import is_open_here
async def main() -> None:
    url = sys.argv[1]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async def run(job: psyq.Job) -> None:
        pass
    queue = psyq.Queue("handover", connection=url)
    worker = psyq.Worker("handover", run, connection=url, concurrency=10)
    await queue.count()
    print("ready", "owner" if is_open_here(url.removeprefix("sqlite:///")) else "peer", flush=True)
    while not stop.is_set():
        try:
            await queue.add("x", {}, {"durable": True})
        except psyq.ConnectionError as exc:
            print("fail", time.monotonic(), exc, flush=True)
        else:
            print("ok", time.monotonic(), flush=True)
    print("closing", time.monotonic(), flush=True)
    await worker.close()
    await queue.close()
    print("closed", time.monotonic(), flush=True)
asyncio.run(main())
"""

VERBOSE = False  # --verbose: each peer's gap
SETTLE_S = 1.0  # each process adds this long before the owner's exit, and after it


def start_logged(url: str, log: Path, ready: str) -> subprocess.Popen[bytes]:
    """A LOAD process writing to `log` (a pipe would fill and stall it); returns once it
    printed `ready`."""
    with open(log, "w") as out, open(log.with_suffix(".err"), "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", LOAD, url], stdout=out, stderr=err)
    deadline = time.monotonic() + 30
    while ready not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise SystemExit(f"{log.name} did not start: {log.with_suffix('.err').read_text()}")
        time.sleep(0.02)
    return proc


def handover_round(folder: Path, index: int) -> dict[str, float]:
    """One owner and two peers of a fresh file; the owner exits on SIGTERM. Returns the
    figures of this round (see the module docstring)."""
    url = f"sqlite:///{folder / f'handover-{index}.db'}"
    logs = [folder / f"round-{index}-{name}.log" for name in ("owner", "peer1", "peer2")]
    procs = [start_logged(url, logs[0], "ready owner")]
    try:
        procs += [start_logged(url, log, "ready peer") for log in logs[1:]]
        time.sleep(SETTLE_S)
        procs[0].terminate()
        procs[0].wait(30)
        time.sleep(SETTLE_S)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
    stamps = {}
    for line in logs[0].read_text().splitlines():
        if line.startswith(("closing ", "closed ")):
            stamps[line.split()[0]] = float(line.split()[1])
    closing, closed = stamps["closing"], stamps["closed"]
    gaps, failed = [], 0
    held = sum(  # the jobs in the file when the owner began to close: what a new owner opens
        line.startswith("ok ") and float(line.split()[1]) < closing
        for log in logs
        for line in log.read_text().splitlines()
    )
    for log in logs[1:]:
        lines = log.read_text().splitlines()
        oks = [float(line.split()[1]) for line in lines if line.startswith("ok ")]
        window = (closing - SETTLE_S / 2, closed + SETTLE_S / 2)  # not the peers' own exit
        fails = [float(line.split()[1]) for line in lines if line.startswith("fail ")]
        failed += sum(window[0] <= t <= window[1] for t in fails)
        around = [t for t in oks if window[0] <= t <= window[1]]
        gaps.append(max(b - a for a, b in itertools.pairwise(around)))
        if VERBOSE:
            took = "took it over" in log.with_suffix(".err").read_text()
            print(f"  {log.name}: gap {gaps[-1] * 1000:.0f} ms, took over: {took}")
    return {
        "stall ms (longest gap between a peer's acknowledged adds)": max(gaps) * 1000,
        "failed adds (ConnectionError, both peers)": failed,
        "owner's close ms (SIGTERM handled to closed)": (closed - closing) * 1000,
        "jobs in the file at the exit": held,
    }


async def takeover_round(folder: Path, index: int, jobs: int) -> dict[str, float]:
    url = f"sqlite:///{folder / f'takeover-{index}.db'}"
    holder = start([sys.executable, "-c", HOLD, url], "ready")
    try:
        async with psyq.Queue("takeover", connection=url) as queue:
            await queue.count()
            started = time.perf_counter()
            await single(queue, jobs)
            peer = jobs / (time.perf_counter() - started)
            holder.terminate()
            holder.wait()
            try:
                await queue.count()  # this process takes the file over
            except psyq.ConnectionError:  # sent before this process saw the owner die
                await queue.count()
            started = time.perf_counter()
            await single(queue, jobs)
            taken = jobs / (time.perf_counter() - started)
    finally:
        holder.kill()
        holder.wait()
    owner = await rate(f"sqlite:///{folder / f'owner-{index}.db'}", single, jobs)
    return {
        "a peer (the owner is another process)": peer,
        "the same Queue once its process took the file over": taken,
        "the owner that opened the file (embedded)": owner,
    }


def takeover(rounds: int, jobs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        runs = [asyncio.run(takeover_round(Path(folder), i, jobs)) for i in range(rounds)]
    print(f"single add, jobs/s, median of {rounds} rounds, {jobs} jobs")
    for name in runs[0]:
        values = [run[name] for run in runs]
        shown = ", ".join(f"{v:,.0f}" for v in values)
        print(f"{name:<54}{statistics.median(values):>10,.0f}   ({shown})")


def handover(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        runs = [handover_round(Path(folder), index) for index in range(rounds)]
    print(f"owner's graceful exit, 2 peers adding and working; median of {rounds} rounds")
    for name in runs[0]:
        values = [run[name] for run in runs]
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:<60}{statistics.median(values):>8.0f}   ({shown})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--handover", action="store_true", help="measure the owner's exit")
    parser.add_argument("--takeover", action="store_true", help="a taken-over Queue's adds")
    parser.add_argument("--verbose", action="store_true", help="--handover: each peer's gap")
    args = parser.parse_args()
    if args.takeover:
        takeover(args.rounds, args.jobs)
        return
    if args.handover:
        global VERBOSE
        VERBOSE = args.verbose
        handover(args.rounds)
        return
    with tempfile.TemporaryDirectory() as folder:
        sides = holders(Path(folder))
        procs = [hold(url, command, ready) for url, command, ready in sides.values()]
        try:
            urls = [url for url, _, _ in sides.values()]
            figures = asyncio.run(measure(urls, args.jobs, args.rounds))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait()
    results = dict(zip(sides, figures, strict=True))
    names = list(results)
    print(f"jobs/s, median of {args.rounds}, {args.jobs} jobs, {os.cpu_count()} cores")
    print(f"{'row':<16}" + "".join(f"{side:>30}" for side in names) + f"{'ratio':>8}")
    for name in ROWS:
        shared, tcp = (results[side][name] for side in names)
        print(f"{name:<16}{shared:>30,.0f}{tcp:>30,.0f}{shared / tcp:>8.2f}")


if __name__ == "__main__":
    main()
