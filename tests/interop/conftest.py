"""Interop with Node BullMQ: the npm registry's bullmq (5 and 6) installed into a temp dir
once per test run, one long-lived Node process per major driving it (node/driver.js), and a
Redis server (PSYQ_TEST_REDIS_URL, else redis-server from PATH); for BullMQ 6's Postgres
backend, bullmq@6 with the `pg` driver, bullmq for Python in a virtualenv of its own, and a
Postgres server found as tests/postgres finds it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import redis_url, services_required
from tests.interop.sides import NodeDriver, NodeSide, PsyqSide
from tests.postgres.conftest import fresh_schema, pg_server  # noqa: F401 - the fixtures
from tests.redis_service import redis_server  # noqa: F401 - the session fixture

NODE_SCRIPTS = Path(__file__).parent / "node"
PYTHON_SCRIPTS = Path(__file__).parent / "python"
BULLMQ_PY = "bullmq[postgres]==3.4.4"  # bullmq for Python whose Postgres backend is tested
BULLMQ_MAJORS = ("5", "6")


def _missing(reason: str) -> None:
    if services_required():
        pytest.fail(f"{reason}; or set PSYQ_REQUIRE_SERVICES=0 to skip these tests")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def bullmq_installs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`install(major, driver="ioredis@5")` -> a node_modules folder holding bullmq@major
    and the driver (installed once)."""
    installed: dict[tuple[str, str], Path] = {}
    cache = tmp_path_factory.mktemp("npm-cache")

    def install(major: str, driver: str = "ioredis@5") -> Path:
        if (major, driver) not in installed:
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                _missing(
                    "node and npm are needed for the BullMQ interop tests (apt install nodejs npm)"
                )
            folder = tmp_path_factory.mktemp(f"bullmq{major}")
            args = [str(npm), "install", "--prefix", str(folder), "--cache", str(cache)]
            args += ["--no-audit", "--no-fund", "--loglevel=error", f"bullmq@{major}", driver]
            done = subprocess.run(args, capture_output=True, text=True, timeout=240)
            if done.returncode != 0:
                _missing(f"npm install bullmq@{major} failed: {done.stderr.strip()[-500:]}")
            installed[(major, driver)] = folder / "node_modules"
        return installed[(major, driver)]

    return install


@pytest.fixture
def node_pg(bullmq_installs: Callable[..., Path]) -> Any:
    """`node_pg(script, *args)` -> the JSON a script under node/pg/ printed, run with
    bullmq@6 and the `pg` driver (BullMQ 6's Postgres backend)."""
    run = _runner(bullmq_installs("6", "pg@8"), "6")
    return lambda script, *args: run(f"pg/{script}", *args)


def _runner(modules: Path, version: str) -> Any:
    def run(script: str, *args: str) -> Any:
        env = {**os.environ, "NODE_PATH": str(modules)}
        done = subprocess.run(
            ["node", str(NODE_SCRIPTS / script), *args],
            capture_output=True,
            text=True,
            timeout=40,
            env=env,
        )
        assert done.returncode == 0, f"node {script} failed: {done.stderr[-2000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    run.version = version  # type: ignore[attr-defined]
    return run


@pytest.fixture(scope="session")
def bullmq_py_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a virtualenv holding bullmq for Python with its Postgres driver (made
    once per test run; psyq's own environment never imports it)."""
    folder = tmp_path_factory.mktemp("bullmq-py")
    made = subprocess.run([sys.executable, "-m", "venv", str(folder)], capture_output=True)
    python = folder / "bin" / "python"
    if made.returncode != 0:
        _missing(f"could not make a virtualenv: {made.stderr.decode()[-500:]}")
    args = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", BULLMQ_PY]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        _missing(f"pip install {BULLMQ_PY} failed: {done.stderr.strip()[-500:]}")
    return python


@pytest.fixture
def bullmq_py(bullmq_py_python: Path) -> Any:
    """`bullmq_py(command, *args)` -> the JSON tests/interop/python/bullmq_pg.py printed."""

    def run(command: str, *args: str) -> Any:
        script = str(PYTHON_SCRIPTS / "bullmq_pg.py")
        done = subprocess.run(
            [str(bullmq_py_python), script, command, *args],
            capture_output=True,
            text=True,
            timeout=50,
        )
        assert done.returncode == 0, f"bullmq_pg.py {command} failed: {done.stderr[-2000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run


@pytest.fixture
def interop_redis_url(request: pytest.FixtureRequest) -> str:
    return redis_url(request)


@pytest.fixture(scope="session", params=BULLMQ_MAJORS, ids=lambda major: f"bullmq{major}")
def node_driver(
    request: pytest.FixtureRequest, bullmq_installs: Callable[..., Path]
) -> Iterator[NodeDriver]:
    """One long-lived Node BullMQ process per major per run, serving every case (driver.js)."""
    modules = bullmq_installs(request.param)
    driver = NodeDriver(modules, redis_url(request))
    driver.major = request.param  # type: ignore[attr-defined]
    yield driver
    driver.close()


@pytest.fixture
async def sides(node_driver: NodeDriver, interop_redis_url: str) -> AsyncIterator[Sides]:
    """(Node, psyq) on the same Redis; both closed (their workers and listeners too) after."""
    node, ours = NodeSide(node_driver), PsyqSide(interop_redis_url)
    try:
        yield Sides(node, ours, str(node_driver.major))  # type: ignore[attr-defined]
    finally:
        await ours.close()
        await node.close()


@dataclass
class Sides:
    node: NodeSide
    psyq: PsyqSide
    major: str
