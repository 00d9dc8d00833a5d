"""A quiet install: the wheel builds without a deprecation warning from the project's
metadata, installs into a fresh virtualenv (no extras), and `psyq demo` runs there."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCE = (".git", ".venv*", "build", "dist", "*.egg-info", "node_modules", "site", "*cache*")


def run(argv: list[str], cwd: Path, timeout: float = 200) -> str:
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{argv} failed:\n{output[-3000:]}"
    return output


@pytest.mark.timeout(300)  # a build, a virtualenv, an install: no test of behaviour is slower
def test_the_wheel_builds_quietly_installs_and_runs_the_demo(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: setuptools leaves build/ in the tree it builds
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    wheels = tmp_path / "dist"
    build = run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-v", "-w", str(wheels)],
        tmp_path,
    )
    noise = [line for line in build.splitlines() if "deprecat" in line.lower()]
    assert noise == [], "\n".join(noise)
    [wheel] = wheels.glob("psyq-*.whl")

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    demo = run([str(venv / "bin" / "psyq"), "demo", "--jobs", "50", "--concurrency", "5"], tmp_path)
    completed = next(line for line in demo.splitlines() if "completed" in line)
    assert "50" in completed
    assert (tmp_path / "psyq.db").exists()  # the embedded default, in the working folder
