"""The `psyq` command line: demo, bad input, and the worker's signal handling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import psyq
from psyq.cli.main import main
from tests.polling import Deadline, eventually_sync

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_every_job(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PSYQ_URL", raising=False)
    assert main(["demo", "--jobs", "300", "--concurrency", "20"]) == 0
    assert (tmp_path / "psyq.db").exists()  # the embedded default
    out = capsys.readouterr().out
    assert "jobs added" in out and "300" in out
    completed = next(line for line in out.splitlines() if "completed" in line)
    assert "300" in completed
    retried = next(line for line in out.splitlines() if "retried" in line)
    assert " 30 " in retried  # every 10th job fails once


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert psyq.__version__ in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["worker", "nocolon", "--queue", "q"], "nocolon"),
        (["worker", "no_such_module_xyz:f", "--queue", "q"], "no_such_module_xyz"),
        (["worker", "tests.cli.procs:missing", "--queue", "q"], "missing"),
        (["worker", "tests.cli.procs:not_callable", "--queue", "q"], "not callable"),
        (
            ["worker", "tests.cli.procs:slow_job", "--queue", "q", "--connection", "bogus://x"],
            "bogus",
        ),
        (["demo", "--connection", "nope"], "nope"),
    ],
)
def test_bad_input_exits_2_naming_the_value(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert named in err
    assert "Traceback" not in err


def test_bad_concurrency_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["worker", "tests.cli.procs:slow_job", "--queue", "q", "--concurrency", "0"])
    assert exit_.value.code == 2
    assert "'0'" in capsys.readouterr().err


def start_worker(tmp_path: Path, seed: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PSYQ_TEST_MARKER": str(tmp_path / "marker")}
    if seed:
        env["PSYQ_TEST_SEED"] = "1"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "psyq",
            "worker",
            "tests.cli.procs:slow_job",
            "--queue",
            "q",
            "--connection",
            "memory://",
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen[str], text: str, timeout: float = 20) -> str:
    """Read the worker's stderr up to a line holding `text` (a read, not a poll: it keeps
    tests.polling's deadline rule)."""
    assert proc.stderr is not None
    deadline = Deadline(f"the worker printing {text!r}", timeout)
    seen = []
    while not deadline.passed():
        line = proc.stderr.readline()
        seen.append(line)
        if text in line:
            return "".join(seen)
        if not line and proc.poll() is not None:
            break
    deadline.fail("".join(seen))


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_worker_stops_cleanly_on_signal(tmp_path: Path, signum: int) -> None:
    proc = start_worker(tmp_path)
    try:
        wait_for_line(proc, "concurrency 1")
        proc.send_signal(signum)
        wait_for_line(proc, "shutting down")
        assert proc.wait(timeout=15) == 0
    finally:
        stop(proc)


def wait_for_file(path: Path, timeout: float = 20) -> None:
    eventually_sync(path.exists, f"{path} to appear", timeout)


def test_sigterm_lets_the_active_job_finish(tmp_path: Path) -> None:
    proc = start_worker(tmp_path, seed=True)
    try:
        wait_for_file(tmp_path / "marker.started")
        proc.send_signal(signal.SIGTERM)
        wait_for_line(proc, "after active jobs")
        assert proc.wait(timeout=15) == 0
        assert (tmp_path / "marker.done").read_text() == "1"
    finally:
        stop(proc)


def test_second_signal_forces_the_close(tmp_path: Path) -> None:
    proc = start_worker(tmp_path, seed=True)
    try:
        wait_for_file(tmp_path / "marker.started")
        proc.send_signal(signal.SIGTERM)
        wait_for_line(proc, "after active jobs")
        proc.send_signal(signal.SIGINT)
        wait_for_line(proc, "now (force)")
        assert proc.wait(timeout=15) == 0
        assert not (tmp_path / "marker.done").exists()
    finally:
        stop(proc)
