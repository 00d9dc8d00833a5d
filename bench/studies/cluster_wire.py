"""Client CPU per script call on Redis Cluster vs one server, side by side in one run.

    python -m bench.studies.cluster_wire [--calls 20000] [--rounds 3]

Starts a private redis-server and a private 3-primary Redis Cluster (no persistence, free
ports, removed at the end) and runs each row on three paths: one server (psyq's lean wire,
`wire.py`), the cluster on the lean wire per primary (`cluster_wire.py`), and the cluster
on redis-py's cluster pipeline (the path before it, `scripts.ScriptPipeline`, chosen by
taking the backend's lean wire away). Rows:
- single add: `Queue.add` one after another (a round trip each);
- gathered: script calls 100 at a time in one event-loop turn (a c100 worker's settles),
  a one-line script over queues of 3 hash tags (every primary of the cluster).
Figures: the client process's CPU (user + system) per call, in microseconds, and the
socket writes per call on the lean paths; the median of `--rounds` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psyq
from bench.harness.processes import free_port, server_process, stop, wait_for_port
from psyq.backends.redis import RedisBackend
from psyq.backends.redis.scripts import Script

SOURCE = "return ARGV[2]"
ECHO = Script("echo", (), SOURCE, hashlib.sha1(SOURCE.encode()).hexdigest())
BATCH = 100
TAGS = ("{a}", "{b}", "{c}")  # slots 15495, 3300, 7365: one per primary of 3


@contextlib.contextmanager
def one_server() -> Iterator[str]:
    port = free_port()
    folder = tempfile.mkdtemp(prefix="psyq-study-redis-")
    command = ["redis-server", "--port", str(port), "--save", "", "--dir", folder]
    try:
        with server_process(command, port):
            yield f"redis://127.0.0.1:{port}/0"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def cluster(primaries: int = 3) -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="psyq-study-cluster-")
    ports = [free_port() for _ in range(primaries)]
    procs = []
    try:
        for port in ports:
            args = ["redis-server", "--port", str(port), "--save", "", "--dir", folder]
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"n-{port}.conf"]
            args += ["--cluster-port", str(free_port())]  # not port + 10000: may pass 65535
            procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL))
            wait_for_port(port, procs[-1])
        nodes = [f"127.0.0.1:{port}" for port in ports]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for port in ports:
            while (
                b"cluster_state:ok"
                not in subprocess.run(
                    ["redis-cli", "-p", str(port), "cluster", "info"], capture_output=True
                ).stdout
            ):
                time.sleep(0.05)  # sleep: polling the cluster's state
        yield f"redis+cluster://127.0.0.1:{ports[0]}/0"
    finally:
        for proc in procs:
            stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


async def single_adds(url: str, calls: int, lean: bool) -> tuple[float, float]:
    async with psyq.Queue(f"{TAGS[0]}adds", connection=url) as queue:
        backend: Any = await queue._open()
        wire = backend._wire if lean else None
        backend._wire = wire
        await queue.add("warm")
        return await measured(wire, calls, lambda: _adds(queue, calls))


async def _adds(queue: psyq.Queue, calls: int) -> None:
    for _ in range(calls):
        await queue.add("j")


async def gathered(url: str, calls: int, lean: bool) -> tuple[float, float]:
    backend = RedisBackend(url)
    await backend.open()
    try:
        keys = [f"bull:{TAGS[n % 3]}g" for n in range(BATCH)]
        wire = backend._wire if lean else None

        def one(key: str) -> Awaitable[Any]:
            if wire is not None:
                return wire.call(ECHO, key, ("x",))
            return backend._pipeline.call(backend.client, ECHO, key, ("x",))  # type: ignore[no-any-return]

        async def batches() -> None:
            for _ in range(calls // BATCH):
                await asyncio.gather(*(one(key) for key in keys))

        await asyncio.gather(*(one(key) for key in keys))
        return await measured(wire, calls, batches)
    finally:
        await backend.close()


async def measured(
    wire: Any, calls: int, run: Callable[[], Awaitable[None]]
) -> tuple[float, float]:
    """(client CPU µs per call, socket writes per call) of `run`."""
    writes = wire.writes if wire is not None else 0
    start = time.process_time()
    await run()
    cpu = time.process_time() - start
    written = (wire.writes - writes) if wire is not None else float("nan")
    return cpu / calls * 1e6, written / calls


ROWS = {"single add": single_adds, "gathered x100": gathered}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with one_server() as plain, cluster() as clustered:
        paths = {
            "one server, lean": (plain, True),
            "cluster, lean per primary": (clustered, True),
            "cluster, redis-py pipeline": (clustered, False),
        }
        print("| row | path | client CPU µs/call | vs one server | writes/call |")
        print("|---|---|---:|---:|---:|")
        for row, measure in ROWS.items():
            base = 0.0
            for path, (url, lean) in paths.items():
                runs = [
                    asyncio.run(measure(url, options.calls, lean)) for _ in range(options.rounds)
                ]
                cpu = statistics.median(r[0] for r in runs)
                writes = statistics.median(r[1] for r in runs)
                base = base or cpu
                print(f"| {row} | {path} | {cpu:.1f} | {cpu / base:.2f}x | {writes:.3f} |")


if __name__ == "__main__":
    main()
