"""A port already in use: `psyq server` and `psyq dashboard` print one line naming the
address and exit with status 2 (no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ["server", "--data", "memory"],
        ["dashboard", "--connection", "memory://"],
    ],
)
def test_a_port_in_use_is_one_line_and_status_2(command: list[str], taken_port: int) -> None:
    argv = [
        sys.executable,
        "-m",
        "psyq",
        *command,
        "--host",
        "127.0.0.1",
        "--port",
        str(taken_port),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=50, cwd=ROOT, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"psyq {command[0]}: cannot listen on 127.0.0.1:{taken_port}: address already in use"
    ]
    assert "listening" not in done.stdout and "dashboard on" not in done.stdout
