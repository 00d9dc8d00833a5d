"""The processes a benchmark starts and reads: a free port, a server run until a block ends
(a `psyq server` among them), and what /proc says of a process (resident memory, CPU).
Written once here for the runner and every study."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository (bench's parent)
PEERS_FOLDER = ROOT / "bench" / "peers"


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """Return once 127.0.0.1:`port` accepts a connection; fail when `proc` exits first or
    `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"no server answered on port {port} (exit code {proc.poll()})")


def stop(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL when it has not exited after `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def server_process(command: list[str], port: int, **popen: Any) -> Iterator[int]:
    """Run a server until the block ends; yields its pid once its port answers."""
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", subprocess.DEVNULL)
    proc = subprocess.Popen(command, **popen)
    try:
        wait_for_port(port, proc)
        yield proc.pid
    finally:
        stop(proc)


def psyq_server_command(port: int, data: str = "memory") -> list[str]:
    """`psyq server` of this interpreter's psyq on `port`, its data in memory or a file."""
    return [sys.executable, "-m", "psyq", "server", "--port", str(port), "--data", data]


@contextlib.contextmanager
def psyq_server(data: str = "memory", **popen: Any) -> Iterator[tuple[str, int]]:
    """A `psyq server` on a free port until the block ends, as (psyq:// URL, pid)."""
    port = free_port()
    with server_process(psyq_server_command(port, data), port, **popen) as pid:
        yield f"psyq://127.0.0.1:{port}", pid


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of process `pid` (this one by default); OSError once it has exited."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds process `pid` has used; OSError once it has exited."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
