"""The `bullmq` package's own test suite (a checkout of bullmq's tests, named by
BULLMQ_PY_TESTS) run against psyq.compat.bullmq: `import bullmq` gives the layer
(bullmq_alias/sitecustomize.py). Without the variable the tests that run it are skipped,
saying so, unless PSYQ_REQUIRE_BULLMQ_SUITE=1 (CI, whose machines have the checkout).

The suite talks to Redis at 127.0.0.1:6379 and FLUSHDBs it after its tests, so it runs in a
private network namespace (`unshare -rn`) whose 127.0.0.1:6379 is a redis-server of its
own: nothing outside sees it. Postgres mode reaches the server through its Unix socket
(a folder in the file system, which the namespace shares), in a database of its own.

Run as a script, this file is that namespace's side: it brings up the loopback, starts the
redis-server, runs pytest on the suite and stops the server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "REQUIRE_VARIABLE",
    "SUITE_FILES",
    "SUITE_VARIABLE",
    "Outcome",
    "missing_tools",
    "run_suite",
    "suite_dir",
    "suite_required",
]

REPO = Path(__file__).resolve().parents[2]
ALIAS_DIR = Path(__file__).resolve().parent / "bullmq_alias"
# The files of the suite that test the package's public API: its yardstick (144 tests).
# Left out, as tests of bullmq's internals: lock_manager (its lock-renewal class),
# redis_connection and redis_connection_cluster (its Redis connection class),
# queue_getters_cluster (its cluster discovery), postgres_backend (its Postgres adapter
# class), sql_loader (its SQL file loader), test_imports (its `custom_errors` module).
SUITE_FILES = tuple(
    f"tests/{name}_test.py"
    for name in (
        "bulk",
        "deduplication",
        "delay",
        "flow",
        "flow_producer",
        "global_rate_limit_concurrency",
        "job",
        "job_cancellation",
        "job_scheduler",
        "priority",
        "queue",
        "queue_events",
        "queue_job_types",
        "worker",
        "worker_disconnect",
    )
)
SUITE_REDIS_PORT = 6379  # the suite's own: redis.Redis(host="localhost") in its fixtures


@dataclass(frozen=True)
class Outcome:
    passed: set[str]
    failed: set[str]  # failed or errored
    skipped: set[str]

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.skipped)


SUITE_VARIABLE = "BULLMQ_PY_TESTS"  # the folder of a checkout of the suite; no default
REQUIRE_VARIABLE = "PSYQ_REQUIRE_BULLMQ_SUITE"  # =1: the suite's absence fails (CI)


def suite_dir() -> Path | None:
    """The suite's checkout, when BULLMQ_PY_TESTS names one: nothing outside the repository
    is looked for by default."""
    folder = os.environ.get(SUITE_VARIABLE)
    return Path(folder) if folder else None


def suite_required() -> bool:
    return os.environ.get(REQUIRE_VARIABLE) == "1"


def missing_tools() -> list[str]:
    """What running the suite named by BULLMQ_PY_TESTS needs and this machine lacks."""
    missing = [tool for tool in ("unshare", "ip", "redis-server") if not shutil.which(tool)]
    suite = suite_dir()
    if suite is not None and not (suite / "tests").is_dir():
        missing.append(f"the bullmq suite at {suite} ({SUITE_VARIABLE} names no checkout)")
    return missing


def run_suite(extra_env: dict[str, str], timeout: float = 600) -> Outcome:
    """Run the suite's files in a private network namespace; `extra_env` picks the mode
    (BULLMQ_TEST_BACKEND=postgres, BULLMQ_PG_URL, ...)."""
    with tempfile.TemporaryDirectory(prefix="bullmq-suite-") as folder:
        report = Path(folder) / "report.xml"
        env = {
            **os.environ,
            **extra_env,
            "PYTHONPATH": os.pathsep.join([str(ALIAS_DIR), str(REPO)]),
            "PYTHONDONTWRITEBYTECODE": "1",  # the suite's folder is shared: write nothing
        }
        env.pop("PSYQ_URL", None)  # the suite's options say where its queues are
        args = ["unshare", "-rn", sys.executable, __file__, str(report), folder]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
        if not report.exists():
            output = (done.stdout + done.stderr)[-3000:]
            raise AssertionError(f"the bullmq suite did not run: {output}")
        return _outcome(report)


def _outcome(report: Path) -> Outcome:
    passed, failed, skipped = set(), set(), set()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"
        module = case.get("classname", "").split(".")[1:2]
        name = f"{module[0] if module else ''}::{name}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(name)
        elif case.find("skipped") is not None:
            skipped.add(name)
        else:
            passed.add(name)
    return Outcome(passed, failed, skipped)


def _inside(report: str, folder: str) -> int:
    """In the namespace: loopback up, a redis-server on the suite's port, then pytest."""
    from tests.redis_service import wait_port  # the repository is on PYTHONPATH here

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    args = ["redis-server", "--port", str(SUITE_REDIS_PORT), "--bind", "127.0.0.1"]
    args += ["--save", "", "--appendonly", "no", "--dir", folder]
    redis = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    try:
        wait_port(SUITE_REDIS_PORT)
        suite = suite_dir()
        assert suite is not None, f"run_suite runs only with {SUITE_VARIABLE} set"
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        args += ["-c", str(suite / "pytest.ini"), "--rootdir", str(suite)]
        args += [f"--junitxml={report}", "-o", "junit_family=xunit1", *SUITE_FILES]
        return subprocess.run(args, cwd=suite).returncode
    finally:
        redis.kill()
        redis.wait()


if __name__ == "__main__":
    sys.exit(_inside(sys.argv[1], sys.argv[2]))
