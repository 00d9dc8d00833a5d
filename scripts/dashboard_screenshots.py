"""Regenerate the dashboard screenshots that docs/dashboard.md shows (docs/dashboard/*.png).

The browser tests (tests/dashboard/test_browser.py) save them to build/screenshots/ on the
sqlite:/// run. Their failed job's traceback would name the file the test's code lives in,
a path of whoever took the pictures; this script runs those tests with that job failed by
code shown as an application's own module, /app/tasks.py, then copies the pictures here.

    .venv/bin/python scripts/dashboard_screenshots.py

Needs what the browser tests need: Debian's `chromium` (or PSYQ_TEST_CHROMIUM) and
Playwright's Python client (the dev extra).
"""

from __future__ import annotations

import linecache
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOWN_AS = "/app/tasks.py"  # the path the traceback shows: neutral, an app's own module
PICTURES = [
    "overview",
    "queue-failed",
    "job-error",
    "queue-live",
    "flow",
    "search",
    "confirm",
    "phone-queue",
    "phone-job",
]

# The failed job of the pictures: a processor's helper raises while parsing a file.
TASKS = '''\
import psyq


def parse_file(path: str) -> None:
    raise ValueError(
        f"""bad input in {path}
line 2: expected a number"""
    )


async def parse(job: psyq.Job) -> None:
    parse_file(job.data["file"])


async def fail_for_real(url: str, name: str) -> str:
    async with psyq.Queue(name, connection=url) as queue:
        job = await queue.add("parse", {"file": "x.csv"}, attempts=1)
        worker = psyq.Worker(name, None, connection=url, autorun=False)
        try:
            taken = await worker.get_next_job("t", block=False)
            try:
                await parse(taken)
            except ValueError as exc:
                await taken.move_to_failed(exc, "t")
        finally:
            await worker.close()
        return job.id
'''


def app_tasks() -> dict[str, Any]:
    """TASKS as a module whose code and source lines are those of /app/tasks.py."""
    linecache.cache[SHOWN_AS] = (len(TASKS), None, TASKS.splitlines(True), SHOWN_AS)
    namespace: dict[str, Any] = {"__name__": "tasks", "__file__": SHOWN_AS}
    exec(compile(TASKS, SHOWN_AS, "exec"), namespace)
    return namespace


class FailInApp:
    """A pytest plugin: the browser tests fail their job through /app/tasks.py."""

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        fail_for_real = app_tasks()["fail_for_real"]
        for item in items:
            item.module.fail_for_real = fail_for_real  # type: ignore[attr-defined]


def main() -> int:
    shots = ROOT / "build" / "screenshots"
    shutil.rmtree(shots, ignore_errors=True)
    sys.path.insert(0, str(ROOT))
    status = pytest.main(
        [
            "-q",
            str(ROOT / "tests" / "dashboard" / "test_browser.py"),
            "-k",
            "not (redis or postgres or memory or tcp)",  # the sqlite:/// runs take the pictures
        ],
        plugins=[FailInApp()],
    )
    if status != 0:
        return int(status)
    for name in PICTURES:
        shutil.copyfile(shots / f"{name}.png", ROOT / "docs" / "dashboard" / f"{name}.png")
    print(f"{len(PICTURES)} pictures copied to docs/dashboard/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
