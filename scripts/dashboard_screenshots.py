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

import inspect
import linecache
import shutil
import sys
from pathlib import Path
from types import ModuleType
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


def app_tasks(tests: ModuleType) -> dict[str, Any]:
    """The tests' failing code (`parse_file`, `fail_for_real`) as a module whose code and
    source lines are those of /app/tasks.py, so its traceback names no machine's path."""
    source = "\n\n".join(
        ["import psyq", inspect.getsource(tests.parse_file), inspect.getsource(tests.fail_for_real)]
    )
    linecache.cache[SHOWN_AS] = (len(source), None, source.splitlines(True), SHOWN_AS)
    namespace: dict[str, Any] = {"__name__": "tasks", "__file__": SHOWN_AS}
    exec(compile(source, SHOWN_AS, "exec"), namespace)
    return namespace


class FailInApp:
    """A pytest plugin: the browser tests fail their job through /app/tasks.py."""

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            tests = item.module  # type: ignore[attr-defined]
            if tests.fail_for_real.__code__.co_filename != SHOWN_AS:
                tests.fail_for_real = app_tasks(tests)["fail_for_real"]


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
