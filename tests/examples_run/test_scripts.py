"""The plain scripts of examples/ run as a user runs them (`python examples/X.py`), on the
backend PSYQ_URL names, and print what they did."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name

from .procs import EXAMPLES

EXPECTED = {
    "producer_worker.py": "10 emails sent; job 1: {'sent': 'user0@example.com'}",
    "flow.py": "bound: {'pages': 3, 'words': 600}",
    "scheduler.py": "3 ticks run: {'from': 'scheduler'}",
}


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "postgres"])
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_the_script_runs(
    script: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = BACKENDS[backend](request)
    env = {"PSYQ_URL": url, "PSYQ_QUEUE": fresh_name(script.split(".")[0])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert EXPECTED[script] in done.stdout
    assert done.stderr == ""
