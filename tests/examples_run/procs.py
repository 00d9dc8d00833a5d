"""Processes for the example tests: their output read by a thread, waited on with deadlines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PSYQ = str(Path(sys.executable).with_name("psyq"))


class Proc:
    """A child process whose stdout and stderr (merged) are collected line by line."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        """The first line holding `text`; fails when the process ends or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                self._reader.join(5)
                if not any(text in line for line in self.lines):
                    pytest.fail(f"{self.argv} ended before {text!r}:\n{self.output()[-3000:]}")
            time.sleep(0.02)
        pytest.fail(f"no {text!r} from {self.argv} within {timeout}s:\n{self.output()[-3000:]}")

    def wait_for_count(self, text: str, count: int, timeout: float = 30) -> None:
        """Until `count` lines hold `text`; fails when time runs out."""
        deadline = time.monotonic() + timeout
        while sum(text in line for line in list(self.lines)) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                pytest.fail(f"not {count} {text!r} from {self.argv}:\n{self.output()[-3000:]}")
            time.sleep(0.02)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, then the exit status (SIGKILL after `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code
