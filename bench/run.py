"""psyq benchmarks, side by side with peers measured in the same run on the same machine.

    python bench/run.py [--backend memory|sqlite|sqlite-durable|psyq|URL ...] [--jobs 20000]
                        [--peers PEER[,PEER...]|none] [--quick] [--loop asyncio|uvloop]

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

Workloads (the same on both sides): add one by one, add_bulk (batches of 1000), processing
N no-op jobs at concurrency 10 and 100, add-to-start latency p50/p99 at a steady 500 jobs/s,
and resident memory per waiting job. Prints one JSON line with every figure, then a table.
Figures are printed, never asserted; on Postgres each system gets a fresh database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psyq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
from peerlib import steady_adds  # noqa: E402  (the pacing the Python peers use too)
from pgdb import is_postgres, own_database, peer_database, peer_dsn  # noqa: E402

PEERS = {
    "bunqueue": HERE / "peers" / "bunqueue",
    "bullmq": HERE / "peers" / "bullmq",
    "bullmq6": HERE / "peers" / "bullmq",
    "bullmq-pg": HERE / "peers" / "bullmq-pg",
    "pgqueuer": HERE / "peers" / "pgqueuer",
    "procrastinate": HERE / "peers" / "procrastinate",
    "bullmq-py": HERE / "peers" / "bullmq-py",
    "bullmq-py-pg": HERE / "peers" / "bullmq-py",
    "saq": HERE / "peers" / "saq",
    "arq": HERE / "peers" / "arq",
}
# Python peers: bench.py in the peer's folder, run from its own virtualenv, needing one
# variable of the peer environment (the server it shares with psyq), plus fixed settings.
REDIS_ONLY = ("REDIS_URL", "runs only against a redis:// backend")
POSTGRES_ONLY = ("PSYQ_BENCH_PG_DSN", "runs only against a postgresql:// backend")
PYTHON_PEERS: dict[str, tuple[tuple[str, str], dict[str, str]]] = {
    "pgqueuer": (POSTGRES_ONLY, {}),
    "procrastinate": (POSTGRES_ONLY, {}),
    "bullmq-py-pg": (POSTGRES_ONLY, {"PEER_STORE": "postgres"}),
    "bullmq-py": (REDIS_ONLY, {}),
    "saq": (REDIS_ONLY, {}),
    "arq": (REDIS_ONLY, {}),
}
PEER_TIMEOUT = 1800  # seconds for one peer's whole bench
BATCH = 1000


def fresh(label: str) -> str:
    return f"bench-{label}-{uuid.uuid4().hex[:8]}"


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def fill(queue: psyq.Queue, count: int) -> float:
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        await queue.add_bulk([{"name": "x", "data": {"i": start + i}} for i in range(size)])
    return count / (time.perf_counter() - started)


async def add_single(url: str, count: int) -> float:
    async with psyq.Queue(fresh("single"), connection=url) as queue:
        started = time.perf_counter()
        for i in range(count):
            await queue.add("x", {"i": i})
        rate = count / (time.perf_counter() - started)
        await queue.obliterate()
    return rate


async def add_bulk(url: str, count: int) -> float:
    async with psyq.Queue(fresh("bulk"), connection=url) as queue:
        rate = await fill(queue, count)
        await queue.obliterate()
    return rate


async def noop(job: psyq.Job) -> None:
    return None


async def processing(url: str, count: int, concurrency: int) -> float:
    async with psyq.Queue(fresh(f"c{concurrency}"), connection=url) as queue:
        await fill(queue, count)
        done = asyncio.Event()
        seen = 0

        def on_completed(job: psyq.Job, result: Any) -> None:
            nonlocal seen
            seen += 1
            if seen == count:
                done.set()

        started = time.perf_counter()
        worker = psyq.Worker(queue.name, noop, connection=url, concurrency=concurrency)
        worker.on("completed", on_completed)
        try:
            await asyncio.wait_for(done.wait(), timeout=max(120.0, count / 100))
        except TimeoutError:  # say what the store holds rather than hang the whole run
            counts = await queue.get_job_counts("waiting", "active", "completed", "failed")
            raise RuntimeError(
                f"c{concurrency}: the worker reported {seen} of {count} completions; the queue "
                f"holds {counts}"
            ) from None
        rate = count / (time.perf_counter() - started)
        await worker.close()
        await queue.obliterate()
    return rate


async def latency(url: str, rate: int, seconds: float, concurrency: int = 10) -> dict[str, float]:
    samples: list[float] = []

    async def record(job: psyq.Job) -> None:
        samples.append((time.perf_counter() - job.data["t"]) * 1000)

    async with psyq.Queue(fresh("latency"), connection=url) as queue:
        worker = psyq.Worker(queue.name, record, connection=url, concurrency=concurrency)
        await worker.wait_until_ready()
        await warm_up(queue, samples)
        total = await steady_adds(rate, seconds, lambda: queue.add("x", {"t": time.perf_counter()}))
        while len(samples) < total:
            await asyncio.sleep(0.005)
        await worker.close()
        await queue.obliterate()
    samples.sort()
    return {"p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99)}


async def warm_up(queue: psyq.Queue, samples: list[float]) -> None:
    """One job through before the timed adds, on every side of the latency row: it
    measures a running worker (its connections open, its statements prepared), not its start."""
    await queue.add("x", {"t": time.perf_counter()})
    while not samples:
        await asyncio.sleep(0.001)
    samples.clear()


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def flow_tree(parents: str, children: str, i: int) -> dict[str, Any]:
    kids = [{"name": "child", "queue_name": children, "data": {"k": k}} for k in range(10)]
    return {"name": "parent", "queue_name": parents, "data": {"i": i}, "children": kids}


async def flows(url: str, trees: int) -> dict[str, float]:
    """Trees of 1 parent + 10 children: added per second, and run to the end per second."""
    parents, children = fresh("parents"), fresh("children")
    async with psyq.FlowProducer(connection=url) as producer:
        started = time.perf_counter()
        for start in range(0, trees, 100):
            size = min(100, trees - start)
            await producer.add_bulk([flow_tree(parents, children, start + i) for i in range(size)])
        added = trees / (time.perf_counter() - started)
    done = asyncio.Event()
    finished = 0

    def on_parent(job: psyq.Job, result: Any) -> None:
        nonlocal finished
        finished += 1
        if finished == trees:
            done.set()

    started = time.perf_counter()
    kids = psyq.Worker(children, noop, connection=url, concurrency=100)
    tops = psyq.Worker(parents, noop, connection=url, concurrency=100)
    tops.on("completed", on_parent)
    await done.wait()
    processed = trees / (time.perf_counter() - started)
    await kids.close()
    await tops.close()
    return {"added": added, "processed": processed}


async def redis_used_memory(url: str) -> int:
    from redis.asyncio import Redis

    client = Redis.from_url(url.split("?")[0])
    try:
        info = await client.info("memory")
        return int(info["used_memory"])
    finally:
        await client.aclose()


async def memory_per_job(url: str, count: int, pid: int | str = "self") -> float:
    """RSS growth per waiting job of process `pid` (this one, or the server's); on Redis,
    the server's used_memory (the jobs live there)."""
    if url.startswith(("redis://", "rediss://")):
        before = await redis_used_memory(url)
        async with psyq.Queue(fresh("memory"), connection=url) as queue:
            await fill(queue, count)
            per_job = (await redis_used_memory(url) - before) / count
            await queue.obliterate()
        return per_job
    gc.collect()
    before = rss_bytes(pid)
    async with psyq.Queue(fresh("memory"), connection=url) as queue:
        await fill(queue, count)
        gc.collect()
        per_job = (rss_bytes(pid) - before) / count
        await queue.obliterate()
    return per_job


async def run_psyq(url: str, cfg: dict[str, Any], server_pid: int | None) -> dict[str, Any]:
    return {
        "add_single": await add_single(url, cfg["single"]),
        "add_bulk": await add_bulk(url, cfg["jobs"]),
        "c10": await processing(url, cfg["jobs"], 10),
        "c100": await processing(url, cfg["jobs"], 100),
        "latency": await latency(url, cfg["rate"], cfg["seconds"]),
        "flows": await flows(url, cfg["trees"]),
        "bytes_per_waiting_job": await memory_per_job(url, cfg["memoryJobs"], server_pid or "self")
        if server_pid or "://" not in url or url.startswith(("memory:", "sqlite:", "redis"))
        else math.nan,
    }


def peer_python(name: str) -> Path | str:
    """The peer's virtualenv Python, (re)installed from its requirements.txt when the
    virtualenv is missing or older than that file; or why it could not be made."""
    folder = PEERS[name]
    python = folder / ".venv" / "bin" / "python"
    marker = folder / ".venv" / ".installed"
    requirements = folder / "requirements.txt"
    if marker.exists() and marker.stat().st_mtime >= requirements.stat().st_mtime:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder / ".venv")], check=False)
    install = [str(python), "-m", "pip", "install", "-q", "-r", "requirements.txt"]
    proc = subprocess.run(install, cwd=folder, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        return f"could not install {name} from {requirements}: {proc.stderr.strip()[-300:]}"
    marker.touch()
    return python


def run_python_peer(name: str, cfg: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | str:
    """A Python peer's figures on the server psyq used, or the reason it could not run."""
    (needed, refusal), settings = PYTHON_PEERS[name]
    if needed not in env:
        return f"{name} {refusal}"
    python = peer_python(name)
    if isinstance(python, str):
        return python
    command = [str(python), "bench.py", json.dumps(cfg)]
    return run_peer_command(name, command, {**env, **settings})


def peer_bun(name: str) -> Path | str:
    """The peer folder's bun binary (installing the peer with npm on first use), or why not."""
    folder = PEERS[name]
    bun = folder / "node_modules" / ".bin" / "bun"
    if not bun.exists():
        npm = shutil.which("npm")
        if npm is None:
            return "npm is not installed"
        install = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"]
        subprocess.run(install, cwd=folder, check=False, capture_output=True)
    if not bun.exists():
        return f"could not install {name} with npm in {folder}"
    return bun


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"no server answered on port {port} (exit code {proc.poll()})")


@contextlib.contextmanager
def server_process(command: list[str], port: int, **kwargs: Any) -> Iterator[int]:
    """Run a server until the block ends; yields its pid once its port answers."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    try:
        wait_for_port(port, proc)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def drop_bench_queues(url: str) -> None:
    """Remove every queue this run made on a shared Redis (their names start with bench-)."""
    from redis.asyncio import Redis

    client = Redis.from_url(url.split("?")[0])
    try:
        batch: list[bytes] = []
        async for key in client.scan_iter(match="bull:bench-*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                await client.delete(*batch)
                batch.clear()
        if batch:
            await client.delete(*batch)
    finally:
        await client.aclose()


# Node peers: the npm package each runs (bench.mjs imports it: PEER_PACKAGE), and the
# server it needs (as PYTHON_PEERS). bullmq6 is an npm alias of bullmq 6 in the bullmq folder.
NODE_PEERS: dict[str, tuple[str, tuple[str, str] | None]] = {
    "bullmq": ("bullmq", None),  # Node BullMQ 5.x on Redis
    "bullmq6": ("bullmq6", None),  # Node BullMQ 6 (the latest) on Redis
    "bullmq-pg": ("bullmq", POSTGRES_ONLY),  # Node BullMQ 6 on its PostgreSQL backend
}


def run_node_peer(name: str, cfg: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | str:
    """A Node peer (`node bench.mjs`), installed with npm on first use."""
    package, needs = NODE_PEERS[name]
    if needs is not None and needs[0] not in env:
        return f"{name} {needs[1]}"
    folder = PEERS[name]
    if not (folder / "node_modules" / package / "package.json").exists():
        npm = shutil.which("npm")
        if npm is None:
            return "npm is not installed"
        install = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"]
        subprocess.run(install, cwd=folder, check=False, capture_output=True)
    if not (folder / "node_modules" / package / "package.json").exists():
        return f"could not install {name} with npm in {folder}"
    command = ["node", "bench.mjs", json.dumps(cfg)]
    return run_peer_command(name, command, {**env, "PEER_PACKAGE": package})


def run_peer(name: str, cfg: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | str:
    """The peer's figures, or the reason it could not run. With env["PEER_TCP"], against the
    peer's own TCP server (memory, started here, its per-client rate limit turned off)."""
    if name in NODE_PEERS:
        return run_node_peer(name, cfg, env)
    if name in PYTHON_PEERS:
        return run_python_peer(name, cfg, env)
    bun = peer_bun(name)
    if isinstance(bun, str):
        return bun
    if not env.get("PEER_TCP"):
        return run_peer_script(name, bun, cfg, env)
    port = free_port()
    command = [str(bun), "node_modules/bunqueue/dist/cli/index.js", "start"]
    command += ["--host", "127.0.0.1", "--tcp-port", str(port), "--http-port", str(free_port())]
    limits = {"RATE_LIMIT_MAX_REQUESTS": str(2**31 - 1)}
    try:
        with server_process(command, port, cwd=PEERS[name], env={**os.environ, **limits}) as pid:
            return run_peer_script(name, bun, {**cfg, "port": port, "serverPid": pid}, {})
    except RuntimeError as exc:
        return f"{name} TCP server: {exc}"


def run_peer_script(
    name: str, bun: Path, cfg: dict[str, Any], env: dict[str, str]
) -> dict[str, Any] | str:
    return run_peer_command(name, [str(bun), "bench.ts", json.dumps(cfg)], env)


def run_peer_command(name: str, command: list[str], env: dict[str, str]) -> dict[str, Any] | str:
    """Run a peer's bench in its folder; its figures are the last line it prints (JSON)."""
    try:
        proc = subprocess.run(
            command,
            cwd=PEERS[name],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=PEER_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return f"{name} did not finish in {PEER_TIMEOUT} s: {stderr.strip()[-300:]}"
    if proc.returncode != 0:
        return f"{name} failed: {proc.stderr.strip()[-300:]}"
    try:
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return f"{name} printed no figures: {proc.stderr.strip()[-300:]}"
    return result


def resolve_backend(name: str, folder: Path) -> tuple[str, str, dict[str, str]]:
    """(psyq URL, peer mode label, peer environment) for a --backend value. Short names:
    memory, sqlite, sqlite-durable (files in a fresh temporary folder); or a URL."""
    if name in ("memory", "memory://"):
        return "memory://", "embedded, in memory", {}
    if name in ("sqlite", "sqlite-durable"):
        mode = "durable" if name.endswith("durable") else "buffered"
        data = {"DATA_PATH": str(folder / f"bunqueue-{mode}.db")}
        return f"sqlite:///{folder}/psyq-{mode}.db?durability={mode}", "embedded, SQLite", data
    if name.startswith("sqlite:"):
        return name, "embedded, SQLite", {"DATA_PATH": str(folder / "bunqueue.db")}
    if name.startswith(("redis://", "rediss://")):
        return name, "the same Redis server", {"REDIS_URL": name}
    if name == "psyq" or name.startswith(("psyq:", "psyqs:")):
        return name, "TCP server, in memory", {"PEER_TCP": "1"}
    if is_postgres(name):
        return name, "same Postgres server, a fresh database each", peer_dsn(name)
    return name, "embedded, in memory", {}


@contextlib.contextmanager
def psyq_server(name: str) -> Iterator[tuple[str, int | None]]:
    """For --backend psyq: a `psyq server` (memory data) on a free port, as (URL, pid)."""
    if name != "psyq":
        yield name, None
        return
    port = free_port()
    command = [sys.executable, "-m", "psyq", "server", "--port", str(port), "--data", "memory"]
    with server_process(command, port) as pid:
        yield f"psyq://127.0.0.1:{port}", pid


ROWS = [
    ("add one by one (jobs/s)", "add_single", True),
    ("add_bulk (jobs/s)", "add_bulk", True),
    ("processing c10 (jobs/s)", "c10", True),
    ("processing c100 (jobs/s)", "c100", True),
    ("flows added (trees of 1+10/s)", "flows.added", True),
    ("flows processed (trees of 1+10/s)", "flows.processed", True),
    ("add-to-start p50 (ms)", "latency.p50", False),
    ("add-to-start p99 (ms)", "latency.p99", False),
    ("memory per waiting job (bytes)", "bytes_per_waiting_job", False),
]


def pick(figures: dict[str, Any], key: str) -> float | None:
    """The figure at `key` ("a.b"), or None when that side has no such row."""
    value: Any = figures
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value)


def fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3f}"


def ratio(mine: float, theirs: float, higher_is_better: bool) -> str:
    """psyq vs peer, > 1 when psyq is better; n/a when either side has no figure."""
    if math.isnan(mine) or math.isnan(theirs):
        return "n/a"
    numerator, denominator = (mine, theirs) if higher_is_better else (theirs, mine)
    return f"{numerator / denominator:.2f}x" if denominator else "inf"


def table(
    psyq_figures: dict[str, Any],
    peers: dict[str, dict[str, Any] | str],
    mine_runs: list[dict[str, Any]] | None = None,
    peer_runs: dict[str, list[dict[str, Any] | str]] | None = None,
) -> str:
    """Rows of workload, psyq, then per peer its figure and psyq vs that peer (ratio > 1
    means psyq is better). With several rounds the ratio cell is the median of the rounds'
    ratios, then their range."""
    header = ["workload", "psyq"]
    for peer in peers:
        header += [peer, f"psyq vs {peer}"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for label, key, higher_is_better in ROWS:
        mine = pick(psyq_figures, key)
        assert mine is not None
        cells = [label, fmt(mine)]
        for peer, figures in peers.items():
            theirs = None if isinstance(figures, str) else pick(figures, key)
            if theirs is None:
                cells += ["n/a", "n/a"]
                continue
            runs = (peer_runs or {}).get(peer, [])
            if mine_runs is None or len(mine_runs) < 2 or len(runs) != len(mine_runs):
                cells += [fmt(theirs), ratio(mine, theirs, higher_is_better)]
                continue
            cells += [fmt(theirs), paired_ratios(mine_runs, runs, key, higher_is_better)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_ratios(
    mine_runs: list[dict[str, Any]],
    runs: list[dict[str, Any] | str],
    key: str,
    higher_is_better: bool,
) -> str:
    """`median (low-high)` of each round's psyq-vs-peer ratio."""
    found = []
    for mine, theirs in zip(mine_runs, runs, strict=True):
        a = pick(mine, key)
        b = None if isinstance(theirs, str) else pick(theirs, key)
        if a is None or b is None or math.isnan(a) or math.isnan(b) or not (a and b):
            return "n/a"
        found.append(a / b if higher_is_better else b / a)
    return f"{statistics.median(found):.2f}x ({min(found):.2f}-{max(found):.2f}x)"


def peer_notes(peers: dict[str, dict[str, Any] | str]) -> list[str]:
    """Notes under the table: why a peer is n/a, and what each peer says about its rows."""
    notes: list[str] = []
    for peer, figures in peers.items():
        if isinstance(figures, str):
            notes.append(f"{peer}: n/a — {figures}")
        else:
            notes += [str(note) for note in figures.get("notes", [])]
    return notes


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
        help="memory, sqlite, sqlite-durable or a URL; repeat for several (default: memory)",
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
        with psyq_server(url) as (served, server_pid), own_database(served, "psyq") as served:
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
    mine = median_figures(mine_runs)
    figures = {peer: median_figures(runs) for peer, runs in peer_runs.items()}
    print(json.dumps({"backend": served, "config": cfg, "rounds": rounds, "psyq": mine, **figures}))
    print(table(mine, figures or {"none": "not run (--peers none)"}, mine_runs, peer_runs))
    for note in peer_notes(figures):
        print(f"- {note}")


def median_figures(runs: list[dict[str, Any] | str]) -> dict[str, Any] | str:
    """Each figure's median over the runs (a peer that failed in any run: its reason)."""
    failed = [run for run in runs if isinstance(run, str)]
    if failed:
        return failed[0]
    done = [run for run in runs if not isinstance(run, str)]
    if len(done) == 1:
        return done[0]
    merged: dict[str, Any] = dict(done[0])
    for _, key, _ in ROWS:
        values = [value for value in (pick(run, key) for run in done) if value is not None]
        if values:
            place(merged, key, statistics.median(values))
    return merged


def place(figures: dict[str, Any], key: str, value: float) -> None:
    """Set the figure at `key` ("a.b"), copying the nested dict it sits in."""
    *path, last = key.split(".")
    for part in path:
        figures[part] = figures = dict(figures[part])
    figures[last] = value


if __name__ == "__main__":
    sys.exit(main())
