"""The `bullmq` package's own test suite passes against psyq.compat.bullmq, in both of its
modes (Redis, and Postgres: `BULLMQ_TEST_BACKEND=postgres`), and every test of it that does
not pass is listed, with its reason, in docs/porting.md (tests/compat/bullmq_suite.py runs
it in a private network namespace, beside nothing else)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.compat.bullmq_suite import (
    REQUIRE_VARIABLE,
    SUITE_VARIABLE,
    missing_tools,
    run_suite,
    suite_dir,
    suite_required,
)
from tests.conformance.conftest import services_required
from tests.postgres.conftest import pg_server  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(900)

PORTING = Path(__file__).resolve().parents[2] / "docs" / "porting.md"
SUITE_DATABASE = "psyq_bullmq_suite"  # the suite drops its schema at will: a database of its own
# what each mode must reach (of 144)
FLOOR = {"redis": 142, "postgres": 136}


@pytest.fixture
def suite_tools() -> None:
    """The suite where a checkout of it is named (skipped, saying so, where none is, unless
    PSYQ_REQUIRE_BULLMQ_SUITE=1), and the tools its run needs."""
    if suite_dir() is None:
        reason = (
            f"the bullmq suite runs from a checkout of bullmq's tests named by {SUITE_VARIABLE}"
        )
        if suite_required():
            pytest.fail(f"{reason}, unset here; {REQUIRE_VARIABLE}=1 requires it")
        pytest.skip(f"{reason} (unset)")
    missing = missing_tools()
    if missing:
        reason = f"the bullmq suite run needs {', '.join(missing)}"
        if services_required():
            pytest.fail(f"{reason}; or set PSYQ_REQUIRE_SERVICES=0 to skip it")
        pytest.skip(reason)


@pytest.fixture
async def suite_conninfo(pg_server: str) -> AsyncIterator[str]:  # noqa: F811 - the fixture
    """A libpq conninfo string of a fresh database for the suite, through the server's Unix
    socket (the suite's network namespace has no route to its TCP port)."""
    admin = await asyncpg.connect(pg_server)
    try:
        folders = str(await admin.fetchval("SHOW unix_socket_directories"))
        port = await admin.fetchval("SHOW port")
        await admin.execute(f"DROP DATABASE IF EXISTS {SUITE_DATABASE} WITH (FORCE)")
        await admin.execute(f"CREATE DATABASE {SUITE_DATABASE}")
    finally:
        await admin.close()
    folder = folders.split(",")[0].strip()
    if not folder.startswith("/"):
        pytest.fail(f"the Postgres server at {pg_server} has no Unix socket folder ({folders!r})")
    user = urlsplit(pg_server).username or "postgres"
    yield f"host={folder} port={port} dbname={SUITE_DATABASE} user={user}"
    admin = await asyncpg.connect(pg_server)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {SUITE_DATABASE} WITH (FORCE)")
    finally:
        await admin.close()


def documented_failures(mode: str) -> set[str]:
    """The suite's tests that docs/porting.md lists as not passing in `mode`: the rows
    `| `<file>::<class>::<test>` | <Redis, Postgres or both> | <why> |`."""
    rows = re.findall(r"^\| `(\w+::\w+::\w+)` \| (Redis|Postgres|both)[^|]*\|", _doc(), re.M)
    return {test for test, where in rows if where in ("both", mode.capitalize())}


def _doc() -> str:
    return PORTING.read_text("utf-8")


@pytest.mark.usefixtures("suite_tools")
async def test_the_suite_passes_in_redis_mode() -> None:
    outcome = await asyncio.to_thread(run_suite, {})
    assert outcome.total == 144
    assert outcome.failed | outcome.skipped == documented_failures("redis")
    assert len(outcome.passed) >= FLOOR["redis"]


@pytest.mark.usefixtures("suite_tools")
async def test_the_suite_passes_in_postgres_mode(suite_conninfo: str) -> None:
    env = {"BULLMQ_TEST_BACKEND": "postgres", "BULLMQ_PG_URL": suite_conninfo}
    outcome = await asyncio.to_thread(run_suite, env)
    assert outcome.total == 144
    assert outcome.failed | outcome.skipped == documented_failures("postgres")
    assert len(outcome.passed) >= FLOOR["postgres"]
