"""Processes for the example tests: their output read by a thread, waited on with deadlines."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.polling import eventually_sync

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

        def found() -> str | None:
            line = self._line_with(text)
            if line is None and self.proc.poll() is not None:
                self._reader.join(5)
                line = self._line_with(text)
                if line is None:
                    pytest.fail(f"{self.argv} ended before {text!r}:\n{self.output()[-3000:]}")
            return line

        with self._output_on_failure():
            line = eventually_sync(found, f"{text!r} from {self.argv}", timeout, interval=0.02)
        assert line is not None  # eventually_sync returns a truthy value
        return line

    def wait_for_count(self, text: str, count: int, timeout: float = 30) -> None:
        """Until `count` lines hold `text`; fails when the process ends or time runs out."""

        def counted() -> bool:
            if self.proc.poll() is not None and self._count(text) < count:
                pytest.fail(f"not {count} {text!r} from {self.argv}:\n{self.output()[-3000:]}")
            return self._count(text) >= count

        with self._output_on_failure():
            eventually_sync(counted, f"{count} {text!r} from {self.argv}", timeout, interval=0.02)

    def _line_with(self, text: str) -> str | None:
        return next((line for line in list(self.lines) if text in line), None)

    def _count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    @contextlib.contextmanager
    def _output_on_failure(self) -> Iterator[None]:
        """A wait that timed out also shows the end of the process's output."""
        try:
            yield
        except AssertionError as failed:
            raise AssertionError(f"{failed}:\n{self.output()[-3000:]}") from None

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
