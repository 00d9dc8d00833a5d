"""Interop with Node BullMQ: the npm registry's bullmq (5 and 6) installed into a temp dir
once per test run, one long-lived Node process per major driving it (node/driver.js), and a
Redis server (PSYQ_TEST_REDIS_URL, else redis-server from PATH)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.conftest import redis_url, services_required
from tests.interop.sides import NodeDriver, NodeSide, PsyqSide
from tests.redis_service import redis_server  # noqa: F401 - the session fixture

BULLMQ_MAJORS = ("5", "6")


def _missing(reason: str) -> None:
    if services_required():
        pytest.fail(f"{reason}; or set PSYQ_REQUIRE_SERVICES=0 to skip these tests")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def bullmq_installs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`install(major)` -> a node_modules folder holding bullmq@major (installed once)."""
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
            args += ["--no-audit", "--no-fund", "--loglevel=error", f"bullmq@{major}", "ioredis@5"]
            done = subprocess.run(args, capture_output=True, text=True, timeout=240)
            if done.returncode != 0:
                _missing(f"npm install bullmq@{major} failed: {done.stderr.strip()[-500:]}")
            installed[major] = folder / "node_modules"
        return installed[major]

    return install


@pytest.fixture
def interop_redis_url(request: pytest.FixtureRequest) -> str:
    return redis_url(request)


@pytest.fixture(scope="session", params=BULLMQ_MAJORS, ids=lambda major: f"bullmq{major}")
def node_driver(
    request: pytest.FixtureRequest, bullmq_installs: Callable[[str], Path]
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
