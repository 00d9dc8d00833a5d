"""The dashboard's page itself: its script runs in jsdom (from the npm registry, installed into
a temp dir once per run) against a dashboard serving a real SQLite store over TCP."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from psyq.dashboard.store import Store
from psyq.dashboard.web import create_app
from tests.conftest import fresh_name
from tests.interop.conftest import _missing
from tests.queues import fill_queue

PAGE_JS = Path(__file__).parent / "node" / "page.js"


@pytest.fixture(scope="session")
def jsdom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        _missing("node and npm are needed for the dashboard page tests (apt install nodejs npm)")
    folder = tmp_path_factory.mktemp("jsdom")
    args = [str(npm), "install", "--prefix", str(folder), "--no-audit", "--no-fund"]
    done = subprocess.run(
        [*args, "--loglevel=error", "jsdom@24"], capture_output=True, text=True, timeout=240
    )
    if done.returncode != 0:
        _missing(f"npm install jsdom failed: {done.stderr.strip()[-500:]}")
    return folder / "node_modules"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """site(read_only=False, token=None) -> (base URL, store URL) of a running dashboard."""
    servers: list[TestServer] = []

    async def start(read_only: bool = False, token: str | None = None) -> tuple[str, str]:
        url = f"sqlite:///{tmp_path}/jobs.db?durability=durable"
        server = TestServer(create_app(Store(url), read_only=read_only, token=token))
        await server.start_server()
        servers.append(server)
        return str(server.make_url("")).rstrip("/"), url

    try:
        yield start
    finally:
        for server in servers:
            await server.close()


async def show(jsdom: Path, base: str, route: str, token: str | None = None) -> dict[str, Any]:
    """What the page shows at `route` (a hash route), read by page.js."""
    args = [str(PAGE_JS), base, route, *([token] if token else [])]
    proc = await asyncio.create_subprocess_exec(
        "node",
        *args,
        env={**os.environ, "NODE_PATH": str(jsdom)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)  # type: ignore[no-any-return]


async def test_the_queue_list_and_a_queue_with_markup_in_a_job_name(jsdom: Path, site: Any) -> None:
    base, url = await site()
    name = fresh_name("page")
    ids = await fill_queue(url, name, bad_name="<script>x</script>")
    shown = await show(jsdom, base, "#/")
    assert shown["error"] == ""
    header, *rows = shown["rows"]
    assert header[:3] == ["queue", "waiting", "paused"]
    [row] = [r for r in rows if r[0] == name]
    assert row[1:9] == ["2", "0", "1", "1", "0", "0", "1", "1"]
    failed = await show(jsdom, base, f"#/q/{name}/failed/0")
    assert failed["where"] == f"/ {name}"
    [job_row] = failed["rows"][1:]
    assert job_row[0] == ids["bad"] and job_row[1] == "<script>x</script>"  # text, not markup
    assert job_row[6] == "boom"
    assert failed["scripts"] == 1  # only the page's own script
    assert [label for label, disabled in failed["buttons"] if not disabled] == [
        "pause",
        "retry all failed",
        "clean completed",
    ]


async def test_a_job_page_and_a_read_only_dashboard(jsdom: Path, site: Any) -> None:
    base, url = await site(read_only=True)
    name = fresh_name("page")
    ids = await fill_queue(url, name, bad_name="<script>x</script>")
    shown = await show(jsdom, base, f"#/q/{name}/job/{ids['bad']}")
    fields = {row[0]: row[1] for row in shown["rows"][1:]}
    assert json.loads(fields["data"]) == {"x": "<b>"}
    assert json.loads(fields["failed_reason"]) == "boom"
    assert json.loads(fields["state"]) == "failed"
    assert shown["buttons"] and all(disabled for _, disabled in shown["buttons"])


async def test_the_page_asks_for_the_token(jsdom: Path, site: Any) -> None:
    base, url = await site(token="s3cret")
    await fill_queue(url, fresh_name("page"))
    refused = await show(jsdom, base, "#/")
    assert "token" in refused["error"] and refused["rows"] == []
    allowed = await show(jsdom, base, "#/", token="s3cret")
    assert allowed["error"] == "" and len(allowed["rows"]) == 2
