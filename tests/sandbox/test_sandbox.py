"""Sandbox: processors in child processes, on real queues."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import psyq
from psyq.sandbox import Sandbox
from tests.conformance.conftest import BACKENDS, Recorder
from tests.conftest import fresh_name
from tests.polling import eventually


@pytest.fixture(params=["memory", "sqlite", "psyq", "redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    async with Sandbox("tests.sandbox.tasks:work", processes=2) as box:
        yield box


async def run(url: str, processor: Any, *jobs: tuple[Any, dict[str, Any]], **worker: Any) -> Any:
    """Add jobs ((data, opts) each) and run them with `processor`; the settled jobs."""
    name = fresh_name("sandbox")
    async with psyq.Queue(name, connection=url) as queue:
        added = [await queue.add("job", data, **opts) for data, opts in jobs]
        runner = psyq.Worker(name, processor, connection=url, **worker)
        rec = Recorder(runner, "completed", "failed", "error")
        try:
            for job in added:
                await wait_for_settled(queue, job.id)
        finally:
            await runner.close()
        assert rec.events["error"] == []
        return [await queue.get_job(job.id) for job in added], [
            (await queue.get_job_logs(job.id))["logs"] for job in added
        ]


async def wait_for_settled(queue: psyq.Queue, job_id: str) -> None:

    async def settled() -> bool:
        return await queue.get_job_state(job_id) in ("completed", "failed")

    await eventually(settled, timeout=20)


async def test_jobs_run_in_child_processes_with_progress_and_logs(
    url: str, sandbox: Sandbox
) -> None:
    (first, second), logs = await run(url, sandbox, ({"n": 2}, {}), ({"n": 5}, {}), concurrency=2)
    assert first.returnvalue["doubled"] == 4 and second.returnvalue["doubled"] == 10
    assert first.returnvalue["pid"] != os.getpid() != second.returnvalue["pid"]
    assert first.progress == 50 and logs[0] == ["working on job"]


async def test_a_sandboxed_processor_sees_the_job_group(url: str, sandbox: Sandbox) -> None:
    (job,), _ = await run(url, sandbox, ({"n": 1}, {"group": {"id": 7, "priority": 2}}))
    assert job.returnvalue["group"] == {"id": "7", "priority": 2}


async def test_an_async_processor_in_the_sandbox() -> None:
    async with Sandbox("tests.sandbox.tasks:async_work") as box:
        (job,), _ = await run("memory://", box, ({"n": 41}, {}))
    assert job.returnvalue == 42


async def test_errors_retries_and_unrecoverable_errors(sandbox: Sandbox) -> None:
    (retried, fatal, not_json), _ = await run(
        "memory://",
        sandbox,
        ({"fail_first": True}, {"attempts": 2}),
        ({"fatal": True}, {"attempts": 3}),
        ({"not_json": True}, {}),
    )
    assert retried.returnvalue["doubled"] == 0 and retried.attempts_made == 2
    assert retried.stacktrace and "ValueError: first attempt fails" in retried.stacktrace[0]
    assert fatal.failed_reason == "cannot ever work" and fatal.attempts_made == 1
    assert "is not JSON" in (not_json.failed_reason or "")


async def test_a_crashing_or_cancelled_child_fails_its_job_and_is_replaced(
    sandbox: Sandbox,
) -> None:
    (crashed, slow, after), _ = await run(
        "memory://",
        sandbox,
        ({"crash": True}, {}),
        ({"sleep": 30}, {"timeout": 300}),
        ({"n": 1}, {}),
    )
    assert "died (exit code 3)" in (crashed.failed_reason or "")
    assert slow.finished_on is not None and slow.returnvalue is None
    assert "timed out" in (slow.failed_reason or "") or "timeout" in (slow.failed_reason or "")
    assert after.returnvalue["doubled"] == 2


async def test_bad_targets_are_named() -> None:
    with pytest.raises(psyq.PsyqError, match="module:function"):
        Sandbox("no-colon")
    with pytest.raises(psyq.PsyqError, match="no_such_module_xyz"):
        Sandbox("no_such_module_xyz:f")
    with pytest.raises(psyq.PsyqError, match="processes"):
        Sandbox("tests.sandbox.tasks:work", processes=0)
    async with Sandbox("tests.sandbox.tasks:missing") as box:
        (job,), _ = await run("memory://", box, ({}, {}))
    assert "cannot load sandbox target" in (job.failed_reason or "")
    assert "missing" in (job.failed_reason or "")


async def test_a_file_target_runs_that_file(tmp_path: Path) -> None:
    tasks = tmp_path / "file_tasks.py"
    tasks.write_text(
        "import os\n\n"
        "def triple(job):\n    return {'tripled': job.data['n'] * 3, 'pid': os.getpid()}\n\n"
        "if __name__ == '__main__':\n    raise SystemExit('run as a script')\n"
    )
    async with Sandbox(f"{tasks}:triple") as box:
        (job,), _ = await run("memory://", box, ({"n": 5}, {}))
    assert job.returnvalue["tripled"] == 15 and job.returnvalue["pid"] != os.getpid()
    with pytest.raises(psyq.PsyqError, match="does not exist"):
        Sandbox(f"{tmp_path / 'absent.py'}:triple")
