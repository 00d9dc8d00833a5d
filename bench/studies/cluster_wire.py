"""Client CPU per script call on Redis Cluster vs one server, side by side in one run.

    python -m bench.studies.cluster_wire [--calls 20000] [--rounds 3]

Starts a private redis-server and a private 3-primary Redis Cluster (no persistence, free
ports, removed at the end) and runs each row on three paths: one server (psyq's lean wire,
`wire.py`), the cluster on the lean wire per primary (`cluster_wire.py`), and the cluster
on redis-py's cluster pipeline (the path before it, `scripts.ScriptPipeline`, chosen by
taking the backend's lean wire away); and, as the before of one write per loop turn, one
server with each call written at once (the lean wire as it was). Rows:
- single add: `Queue.add` one after another (a round trip each);
- gathered: script calls 100 at a time in one event-loop turn (a c100 worker's settles),
  a one-line script over queues of 3 hash tags (every primary of the cluster).
Figures: the client process's CPU (user + system) per call, in microseconds, Redis's CPU
per call (INFO cpu, summed over the cluster's nodes), and the socket writes per call on
the lean paths; the median of `--rounds` rounds, the paths taking turns within each round.
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

from redis import Redis

import psyq
from bench.harness.processes import free_port, server_process, stop, wait_for_port
from psyq.backends.redis import RedisBackend
from psyq.backends.redis.scripts import Script
from psyq.backends.redis.wire import _Wire

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


def redis_cpu(ports: list[int]) -> float:
    total = 0.0
    for port in ports:
        with Redis(port=port) as client:
            cpu = client.info("cpu")
        total += float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return total


def node_ports(url: str) -> list[int]:
    port = int(url.split("//")[1].split("/")[0].rsplit(":", 1)[1])
    if not url.startswith("redis+cluster"):
        return [port]
    with Redis(port=port) as client:
        ranges = client.execute_command("CLUSTER", "SLOTS")
    return sorted({int(r[2][1]) for r in ranges})


@contextlib.contextmanager
def written_at_once(eager: bool) -> Iterator[None]:
    """Each call written to the socket as it is made (the wire before one write per turn)."""
    original = _Wire.send
    if eager:

        def send(self: _Wire, *args: Any, **options: Any) -> Any:
            future = original(self, *args, **options)
            self._write()
            return future

        _Wire.send = send  # type: ignore[method-assign]
    try:
        yield
    finally:
        _Wire.send = original  # type: ignore[method-assign]


def one_round(row: Any, url: str, calls: int, lean: bool, eager: bool) -> tuple[float, ...]:
    ports = node_ports(url)
    before = redis_cpu(ports)
    with written_at_once(eager):
        cpu, writes = asyncio.run(row(url, calls, lean))
    return cpu, (redis_cpu(ports) - before) / calls * 1e6, writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with one_server() as plain, cluster() as clustered:
        paths = {
            "one server, lean": (plain, True, False),
            "one server, a write per call (before)": (plain, True, True),
            "cluster, lean per primary": (clustered, True, False),
            "cluster, redis-py pipeline (before)": (clustered, False, False),
        }
        print(
            "| row | path | client CPU µs/call | vs one server | Redis CPU µs/call | writes/call |"
        )
        print("|---|---|---:|---:|---:|---:|")
        for name, row in ROWS.items():
            runs: dict[str, list[tuple[float, ...]]] = {path: [] for path in paths}
            for _ in range(options.rounds):  # the paths interleaved: a load drift hits all
                for path, (url, lean, eager) in paths.items():
                    runs[path].append(one_round(row, url, options.calls, lean, eager))
            base = 0.0
            for path, rounds in runs.items():
                cpu, server, writes = (statistics.median(r[i] for r in rounds) for i in range(3))
                base = base or cpu
                figures = f"{cpu:.1f} | {cpu / base:.2f}x | {server:.1f} | {writes:.3f}"
                print(f"| {name} | {path} | {figures} |")


if __name__ == "__main__":
    main()
