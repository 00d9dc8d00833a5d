"""Starting the other side of the runner: the peers (Node, Bun and Python, each from its
own folder under bench/peers/, installed on first use), the servers they and psyq run
against (a `psyq server`, bunqueue's TCP server), and the --backend names as URLs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness.pgdb import is_postgres, peer_dsn
from bench.harness.processes import PEERS_FOLDER, free_port, psyq_server, server_process

PEERS = {
    "bunqueue": PEERS_FOLDER / "bunqueue",
    "bullmq": PEERS_FOLDER / "bullmq",
    "bullmq6": PEERS_FOLDER / "bullmq",
    "bullmq-pg": PEERS_FOLDER / "bullmq-pg",
    "pgqueuer": PEERS_FOLDER / "pgqueuer",
    "procrastinate": PEERS_FOLDER / "procrastinate",
    "bullmq-py": PEERS_FOLDER / "bullmq-py",
    "bullmq-py-pg": PEERS_FOLDER / "bullmq-py",
    "saq": PEERS_FOLDER / "saq",
    "arq": PEERS_FOLDER / "arq",
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
    try:
        with bunqueue_server(bun) as (port, pid):
            return run_peer_script(name, bun, {**cfg, "port": port, "serverPid": pid}, {})
    except RuntimeError as exc:
        return f"{name} TCP server: {exc}"


@contextlib.contextmanager
def bunqueue_server(bun: Path) -> Iterator[tuple[int, int]]:
    """bunqueue's TCP server (memory) on a free port until the block ends, as (port, pid),
    with its per-client rate limit turned off (the limit would cap the adds)."""
    port = free_port()
    command = [str(bun), "node_modules/bunqueue/dist/cli/index.js", "start"]
    command += ["--host", "127.0.0.1", "--tcp-port", str(port), "--http-port", str(free_port())]
    limits = {"RATE_LIMIT_MAX_REQUESTS": str(2**31 - 1)}
    env = {**os.environ, **limits}
    with server_process(command, port, cwd=PEERS["bunqueue"], env=env) as pid:
        yield port, pid


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
def serve_backend(name: str) -> Iterator[tuple[str, int | None]]:
    """For --backend psyq: a `psyq server` (memory data) on a free port, as (URL, pid); any
    other backend as it is, with no server of its own."""
    if name != "psyq":
        yield name, None
        return
    with psyq_server() as served:
        yield served
