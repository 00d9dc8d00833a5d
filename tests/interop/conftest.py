"""Interop with Node BullMQ: the npm registry's bullmq (5 and 6) installed into a temp dir
once per test run (6 with the `pg` driver too, for its Postgres backend), one long-lived
Node process per major driving it (node/driver.js; BullMQ 6's serves Redis and Postgres
alike), a Redis server (PSYQ_TEST_REDIS_URL, else redis-server from PATH) and a Postgres
server found as tests/postgres finds it; bullmq for Python in a virtualenv of its own."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.conformance.conftest import redis_url, services_required
from tests.interop.sides import NodeDriver, NodeSide, PsyqSide
from tests.postgres.conftest import fresh_schema, pg_server, url_for  # noqa: F401 - fixtures
from tests.redis_service import redis_server  # noqa: F401 - the session fixture

NODE_SCRIPTS = Path(__file__).parent / "node"
PYTHON_SCRIPTS = Path(__file__).parent / "python"
BULLMQ_PY = "bullmq[postgres]==3.4.4"  # bullmq for Python whose Postgres backend is tested


def _missing(reason: str) -> None:
    if services_required():
        pytest.fail(f"{reason}; or set PSYQ_REQUIRE_SERVICES=0 to skip these tests")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def bullmq_installs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`install(major)` -> a node_modules folder holding bullmq@major and its drivers (ioredis,
    and pg from BullMQ 6 on: its Postgres backend), installed once."""
    installed: dict[str, Path] = {}
    cache = tmp_path_factory.mktemp("npm-cache")

    def install(major: str) -> Path:
        if major not in installed:
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                _missing(
                    "node and npm are needed for the BullMQ interop tests (apt install nodejs npm)"
                )
            folder = tmp_path_factory.mktemp(f"bullmq{major}")
            args = [str(npm), "install", "--prefix", str(folder), "--cache", str(cache)]
            args += ["--no-audit", "--no-fund", "--loglevel=error", f"bullmq@{major}"]
            args += ["ioredis@5", *(["pg@8"] if int(major) >= 6 else [])]
            done = subprocess.run(args, capture_output=True, text=True, timeout=240)
            if done.returncode != 0:
                _missing(f"npm install bullmq@{major} failed: {done.stderr.strip()[-500:]}")
            installed[major] = folder / "node_modules"
        return installed[major]

    return install


@pytest.fixture
def node_pg(bullmq_installs: Callable[[str], Path]) -> Any:
    """`node_pg(script, *args)` -> the JSON a script under node/pg/ printed, run with
    bullmq@6 and the `pg` driver (BullMQ 6's Postgres backend)."""
    run = _runner(bullmq_installs("6"), "6")
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


# The matrix's columns: (store, BullMQ major). BullMQ 5 has no Postgres backend.
COLUMNS = (("redis", "5"), ("redis", "6"), ("postgres", "6"))


@pytest.fixture(scope="session")
def node_drivers(
    bullmq_installs: Callable[[str], Path],
) -> Iterator[Callable[[str], NodeDriver]]:
    """`driver(major)` -> the one long-lived Node BullMQ process of that major (driver.js),
    started on first use and serving every case and store of the run."""
    started: dict[str, NodeDriver] = {}

    def driver(major: str) -> NodeDriver:
        if major not in started:
            started[major] = NodeDriver(bullmq_installs(major))
        return started[major]

    yield driver
    for one in started.values():
        one.close()


@pytest.fixture(scope="session")
def interop_pg_schema(request: pytest.FixtureRequest) -> Iterator[str]:
    """The Postgres matrix's schema, one for the run (each case has its own queues), dropped
    after it; Node BullMQ 6 migrates it first (`use`), as a Node application would."""
    server = request.getfixturevalue("pg_server")
    schema = f"psyq_mx_{uuid.uuid4().hex[:12]}"
    yield schema

    async def drop() -> None:
        conn = await asyncpg.connect(server)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


@pytest.fixture(params=COLUMNS, ids=[f"{store}-bullmq{major}" for store, major in COLUMNS])
async def sides(
    request: pytest.FixtureRequest, node_drivers: Callable[[str], NodeDriver]
) -> AsyncIterator[Sides]:
    """(Node, psyq) on the same store; both closed (their workers and listeners too) after."""
    store, major = request.param
    driver = node_drivers(major)
    url = await _use(request, driver, store)
    node, ours = NodeSide(driver, store), PsyqSide(url)
    try:
        yield Sides(node, ours, major, store)
    finally:
        await ours.close()
        await node.close()


async def _use(request: pytest.FixtureRequest, driver: NodeDriver, store: str) -> str:
    """Name the store to the driver (once per driver) and return psyq's URL for it."""
    if store == "redis":
        url = redis_url(request)
        where = {"url": url}
    else:
        server = request.getfixturevalue("pg_server")
        schema = request.getfixturevalue("interop_pg_schema")
        url = url_for(server, schema)
        where = {"connectionString": server, "schema": schema}
    if store not in driver.stores:
        await driver.call("use", timeout=60, store=store, **where)
        driver.stores.add(store)
    return url


@dataclass
class Sides:
    node: NodeSide
    psyq: PsyqSide
    major: str
    store: str
