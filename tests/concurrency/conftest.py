"""The concurrency layer: several producer, worker and admin processes on one store at
once (Redis, Postgres, a psyq server: the stores several processes share; memory:// and
sqlite:/// belong to one process), counting what each job, parent and scheduler did.

`PSYQ_SOAK_SCALE` (default 1, the CI size: the layer runs in about a minute) multiplies
the work of every scenario; `make soak` runs it at 10 and prints the figures that
docs/reliability.md shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import postgres_url, redis_url

ROOT = Path(__file__).resolve().parents[2]
SCALE = float(os.environ.get("PSYQ_SOAK_SCALE", "1"))

STORES: dict[str, Callable[[pytest.FixtureRequest], str]] = {
    "postgres": postgres_url,
    "redis": redis_url,
    "psyq": lambda request: request.getfixturevalue("psyq_server_url"),
}


def scaled(n: float) -> int:
    return max(1, round(n * SCALE))


@pytest.fixture(params=sorted(STORES))
def store_url(request: pytest.FixtureRequest) -> str:
    return STORES[request.param](request)


class Actors:
    """The processes of one scenario (tests.concurrency.actors), each writing its result
    to a file of `folder`; `stop()` asks those that run until stopped to end."""

    def __init__(self, folder: Path, url: str) -> None:
        self.folder, self.url = folder, url
        self.stop_file = folder / "stop"
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, role: str, **spec: Any) -> None:
        out = self.folder / f"{role}-{len(self._procs)}.json"
        spec.update(role=role, url=self.url, out=str(out), stop=str(self.stop_file))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "tests.concurrency.actors", json.dumps(spec)]
        with (self.folder / f"{out.stem}.log").open("wb") as log:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        self._procs.append((role, proc, out))

    def stop(self) -> None:
        self.stop_file.touch()

    def results(self, role: str, timeout: float = 60) -> list[dict[str, Any]]:
        """The results of every actor of `role`, once each has ended (within `timeout`)."""
        found = []
        deadline = time.monotonic() + timeout
        for name, proc, out in self._procs:
            if name != role:
                continue
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{role} {out.stem} did not end within {timeout}s")
            assert proc.returncode == 0, (self.folder / f"{out.stem}.log").read_text()
            found.append(json.loads(out.read_text()))
        return found

    def kill_all(self) -> None:
        self.stop()
        for _, proc, _ in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def actors(store_url: str, tmp_path: Path) -> Iterator[Actors]:
    crowd = Actors(tmp_path, store_url)
    try:
        yield crowd
    finally:
        crowd.kill_all()
