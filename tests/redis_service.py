"""A redis-server for the tests: one per test run, started from PATH on a free port in a temp
dir (no persistence), killed at exit. Suites register the fixture by importing it."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

__all__ = ["redis_server", "wait_port"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Start one redis-server from PATH for the whole run (on first use), on a free port."""
    started: list[tuple[subprocess.Popen[bytes], str]] = []

    def start(binary: str) -> str:
        if not started:
            folder = tmp_path_factory.mktemp("redis")
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
            args += ["--save", "", "--appendonly", "no"]
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started.append((proc, f"redis://127.0.0.1:{port}/0"))
            wait_port(port)
        return started[0][1]

    yield start
    for proc, _ in started:
        proc.kill()
        proc.wait()


def wait_port(port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
