"""The benchmark harness runs: `python -m bench.run --quick --peers none` on memory://,
sqlite:/// and a psyq server it starts prints, per backend, its JSON line and a table with
every row, each with a positive psyq figure; and every study imports (its own run needs
its servers and minutes: bench/README.md shows how to start each one). Speed is never
asserted: the sizes are the smallest that still run every row."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.harness.tables import ROWS

ROOT = Path(__file__).resolve().parents[2]
STUDIES = sorted(p.stem for p in (ROOT / "bench" / "studies").glob("*.py") if p.stem != "__init__")
BACKENDS = ("memory", "sqlite", "psyq")


def run_harness() -> str:
    """The runner's output on each of BACKENDS at --quick sizes, psyq alone."""
    paths = [str(ROOT), str(ROOT / "migrate"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    command = [sys.executable, "-m", "bench.run", "--quick", "--peers", "none"]
    for backend in BACKENDS:
        command += ["--backend", backend]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def figures_of(output: str) -> list[dict[str, Any]]:
    """The JSON line each backend's run printed."""
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"backend"')]


def table_rows(output: str) -> list[list[str]]:
    """Every table line's cells, header and separator lines left out."""
    rows = []
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] != "workload":
            rows.append(cells)
    return rows


@pytest.fixture(scope="module")
def output() -> str:
    return run_harness()


def test_each_backend_prints_its_figures(output: str) -> None:
    found = figures_of(output)
    assert len(found) == len(BACKENDS), output
    assert found[0]["backend"] == "memory://"
    assert found[1]["backend"].startswith("sqlite:///")
    assert found[2]["backend"].startswith("psyq://127.0.0.1:")  # the server it started
    for run in found:
        mine = run["psyq"]
        for key in ("add_single", "add_bulk", "c10", "c100", "bytes_per_waiting_job"):
            assert mine[key] > 0, (key, run)
        assert mine["flows"]["added"] > 0 and mine["flows"]["processed"] > 0, run
        assert mine["latency"]["p99"] >= mine["latency"]["p50"] > 0, run


def test_each_table_has_every_row_with_a_positive_psyq_figure(output: str) -> None:
    labels = [label for label, _, _ in ROWS]
    rows = table_rows(output)
    assert [cells[0] for cells in rows] == labels * len(BACKENDS)
    for cells in rows:
        assert float(cells[1].replace(",", "")) > 0, cells
        assert cells[2:] == ["n/a", "n/a"], cells  # --peers none: a column saying so


@pytest.mark.parametrize("study", STUDIES)
def test_every_study_imports(study: str) -> None:
    module = importlib.import_module(f"bench.studies.{study}")
    assert module.__doc__, f"bench/studies/{study}.py says what it measures and how to run it"
