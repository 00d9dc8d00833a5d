"""`psyq migrate` as a process: killed with SIGKILL mid-run then run again, bad input, no Java."""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import psyq
from psyq.cli.main import main
from psyq_migrate import MigrateOptions, migrate, verify_backends
from tests.polling import Deadline, eventually_sync

from .fill import read_queues, state_counts

PSYQ = str(Path(sys.executable).with_name("psyq"))
JOBS = 3000


async def fill_plain(url: str, queue: str, jobs: int) -> None:
    async with psyq.Queue(queue, connection=url) as target:
        for start in range(0, jobs, 500):
            batch = range(start, min(start + 500, jobs))
            await target.add_bulk([{"name": "n", "data": {"i": i}} for i in batch])


def wait_until_free(database: Path, timeout: float = 30) -> None:
    """Poll until no process holds the SQLite file's lock (a killed writer's lock goes with
    its process)."""

    def free() -> bool:
        with open(database, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
            return True

    eventually_sync(free, f"{database} unlocked after the kill", timeout, interval=0.05)


def read_until_moved(process: subprocess.Popen[str], jobs: int, timeout: float = 120) -> int:
    """Read the stderr of `process` up to its first progress line ("moved N/total", at most
    one a second) with N >= `jobs`; returns N (fails on exit or timeout)."""
    assert process.stderr is not None
    seen: list[str] = []
    deadline = Deadline(f"psyq migrate moving {jobs} jobs", timeout)
    while not deadline.passed():
        line = process.stderr.readline()
        if not line:
            pytest.fail(f"psyq migrate ended before moving {jobs}: {''.join(seen)[-2000:]}")
        seen.append(line)
        found = re.match(r"moved (\d+)/", line)
        if found and int(found.group(1)) >= jobs:
            return int(found.group(1))
    deadline.fail(seen[-1:])


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
            assert read_until_moved(process, 600) < JOBS  # three waves of fifteen are in
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    wait_until_free(tmp_path / "dst.db")
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


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_is_a_line_a_second_and_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from rich.console import Console

    from psyq.cli import migrate as migrate_cli
    from psyq_migrate import QueuePlan

    clock = Clock()
    monkeypatch.setattr("psyq.cli.migrate.time.monotonic", clock)
    written = io.StringIO()
    observer = migrate_cli.ProgressObserver(Console(file=written), "enqueueing", "enqueued", "rows")
    with observer:
        observer.planned([QueuePlan("orders", {"rows": 10}, {})])
        for at in (0.0, 0.5, 0.9, 1.0, 1.5, 2.2, 2.3, 2.4, 2.5, 2.6):  # a row each
            clock.now = 100.0 + at
            observer.moved("orders", 1)
    assert written.getvalue().splitlines() == [
        "enqueued 1/10 rows (orders)",
        "enqueued 4/10 rows (orders)",  # a second after the first
        "enqueued 6/10 rows (orders)",
        "enqueued 10/10 rows (orders)",  # the last, whenever it comes
    ]
