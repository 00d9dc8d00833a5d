"""`psyq server` subprocesses for tests: start one on a free port, read its address, stop it.

`psyq_server_url` is a session fixture: one server (SQLite data in a temp folder) for every
test that asks for it; killed at the end of the session. `psyq_memory_server_url` is one over
the in-memory engine, for the few tests that check both."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "psyq server listening on "


class ServerProcess:
    """A running `psyq server`; `url` is its psyq:// address."""

    def __init__(self, proc: subprocess.Popen[str], address: str, log: Path) -> None:
        self.proc = proc
        self.address = address
        self.log = log
        self.url = f"psyq://{address}"
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


def start_server(log: Path, *args: str, port: int = 0, timeout: float = 15) -> ServerProcess:
    """Start `psyq server --port PORT ARGS` (0: a free port) and wait, with a deadline, for
    its address line."""
    command = [sys.executable, "-m", "psyq", "server", "--port", str(port), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("a") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            line = proc.stdout.readline()
            if line.startswith(PREFIX):
                address = line[len(PREFIX) :].split()[0]
                return ServerProcess(proc, address, log)
        if proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    proc.stdout.close()
    pytest.fail(f"psyq server did not start: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def psyq_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("psyq-server")
    server = start_server(folder / "server.log", "--data", str(folder / "jobs.db"))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def psyq_memory_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("psyq-memory-server")
    server = start_server(folder / "server.log", "--data", "memory")
    try:
        yield server.url
    finally:
        server.stop()
