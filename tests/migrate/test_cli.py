"""`psyq migrate` as a process: killed with SIGKILL mid-run then run again, bad input, no Java."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import psyq
from psyq.cli.main import main
from psyq_migrate import MigrateOptions, migrate, verify_backends

from .fill import read_queues, state_counts

PSYQ = str(Path(sys.executable).with_name("psyq"))
JOBS = 3000


async def fill_plain(url: str, queue: str, jobs: int) -> None:
    async with psyq.Queue(queue, connection=url) as target:
        for start in range(0, jobs, 500):
            batch = range(start, min(start + 500, jobs))
            await target.add_bulk([{"name": "n", "data": {"i": i}} for i in batch])


def wait_until_free(lock_file: Path, timeout: float = 30) -> None:
    """Poll until no process holds the SQLite file's lock (a killed writer's lock goes with
    its process)."""
    deadline = time.monotonic() + timeout
    while True:
        with open(lock_file, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{lock_file} still locked {timeout}s after the kill")
        time.sleep(0.05)


def read_until(process: subprocess.Popen[str], marker: str, timeout: float = 120) -> list[str]:
    """stderr lines of `process` up to the first containing `marker` (fails on exit or timeout)."""
    assert process.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            pytest.fail(f"psyq migrate ended before {marker!r}: {''.join(seen)[-2000:]}")
        seen.append(line)
        if marker in line:
            return seen
    pytest.fail(f"no {marker!r} within {timeout}s")


@pytest.mark.timeout(240)  # a second Spark session starts in the subprocess
def test_a_run_killed_mid_way_finishes_exactly_when_run_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, destination = f"sqlite:///{tmp_path}/src.db", f"sqlite:///{tmp_path}/dst.db"
    asyncio.run(fill_plain(source, "big", JOBS))
    argv = [PSYQ, "migrate", "--from", source, "--to", destination, "--batch-size", "20"]
    argv += ["--wave-pages", "10"]  # waves of 200 jobs: fifteen of them
    with subprocess.Popen(
        argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True
    ) as process:
        try:
            read_until(process, "moved 600/")  # three waves of fifteen are in
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    wait_until_free(tmp_path / "dst.db.lock")
    partial = sum(state_counts(read_queues(destination, ["big"])["big"]).values())
    assert 0 < partial < JOBS

    rerun = migrate(MigrateOptions(source, destination, verify=True, batch_size=500), spark)
    assert rerun.written == {"big": JOBS - partial}
    assert rerun.verify is not None and rerun.verify.ok
    after = read_queues(destination, ["big"])["big"]
    assert state_counts(after) == {"waiting": JOBS}
    assert len(set(after["order"]["waiting"])) == JOBS  # no duplicates
    assert after == read_queues(source, ["big"])["big"]  # and in the source's order


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--from", "bogus://x", "--to", "sqlite:///x.db"], "bogus"),
        (["--from", "sqlite:///a.db", "--to", "sqlite:///a.db"], "same backend"),
        (["--from", "sqlite:///a.db", "--to", "memory://"], "memory://"),
        (["--from", "sqlite:///a.db", "--to", "sqlite:///b.db?nope=1"], "nope"),
        (["--from", "nourl", "--to", "sqlite:///b.db"], "nourl"),
        (["--from", "sqlite:///a.db", "--to", "sqlite:///b.db", "--queues", "zz"], "zz"),
        (["--from", "sqlite:///typo.db", "--to", "sqlite:///b.db"], "typo.db"),
        (["--from", "sqlite:///a.db", "--to", "sqlite:///no/such/dir/b.db"], "no/such/dir"),
    ],
)
def test_bad_input_exits_2_naming_the_value(
    argv: list[str],
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    asyncio.run(fill_plain("sqlite:///a.db", "q", 1))
    assert main(["migrate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psyq migrate:") and named in err
    assert not list(tmp_path.glob("b.db*")) and not list(tmp_path.glob("typo.db*"))


def test_missing_java_is_named_before_spark_starts(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path}/src.db"
    asyncio.run(fill_plain(source, "q", 3))
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's tools, no java
    argv = [PSYQ, "migrate", "--from", source, "--to", f"sqlite:///{tmp_path}/dst.db"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "Java is missing" in done.stderr and "install Java 17" in done.stderr
    assert (
        verify_backends(source, f"sqlite:///{tmp_path}/dst.db", ["q"]).rows[0].destination.count
        == 0
    )
