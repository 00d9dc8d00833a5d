"""`psyq inspect` and `psyq queue` on every backend that keeps jobs between connections.

Each test fills a queue through the API in one event loop, then runs the command line the
way a user does (`main([...])` runs its own loop) and reads what it printed.
memory:// is left out: every process (and every loop) gets an empty engine.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import psyq
from psyq.cli.main import main
from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name
from tests.queues import FILLED_COUNTS, fill_queue


@pytest.fixture(params=["sqlite-durable", "psyq", "redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _counts(url: str, name: str) -> dict[str, int]:
    async def read() -> dict[str, int]:
        async with psyq.Queue(name, connection=url) as queue:
            return await queue.get_job_counts("waiting", "delayed", "completed", "failed")

    return asyncio.run(read())


def test_overview_lists_every_queue_with_its_counts(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name, paused = fresh_name("insp"), fresh_name("insp-paused")
    asyncio.run(fill_queue(url, name))
    assert main(["queue", "pause", paused, "--connection", url]) == 2  # not there yet

    async def add_paused() -> None:
        async with psyq.Queue(paused, connection=url) as queue:
            await queue.add("x")
            await queue.pause()

    asyncio.run(add_paused())
    capsys.readouterr()
    rows = {row["name"]: row for row in _run(capsys, "inspect", "--connection", url, "--json")}
    assert rows[name]["paused"] is False
    assert rows[name]["counts"] == FILLED_COUNTS
    assert rows[paused]["paused"] is True and rows[paused]["counts"]["paused"] == 1
    assert main(["inspect", "--connection", url]) == 0  # the table
    table = capsys.readouterr().out
    line = next(line for line in table.splitlines() if name in line)
    assert line.split()[1:8] == ["2", "1", "1", "0", "0", "1", "1"]


def test_one_queue_shows_its_newest_jobs_of_a_state(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = fresh_name("insp")
    ids = asyncio.run(fill_queue(url, name))
    view = _run(capsys, "inspect", name, "--connection", url, "--json")
    assert view["state"] == "failed" and view["counts"]["failed"] == 1
    assert [(job["id"], job["failed_reason"]) for job in view["jobs"]] == [(ids["bad"], "boom")]
    assert view["workers"] == [] and view["schedulers"] == []
    waiting = _run(
        capsys, "inspect", name, "--state", "waiting", "--limit", "1", "--json", "--connection", url
    )
    assert [job["name"] for job in waiting["jobs"]] == ["b"]  # the newest one


def test_groups_lists_each_group_with_its_counts_and_status(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = fresh_name("insp-groups")

    async def fill() -> None:
        async with psyq.Queue(name, connection=url) as queue:
            await queue.add_bulk([{"name": "j", "opts": {"group": {"id": g}}} for g in "abb"])
            await queue.pause_group("b")

    asyncio.run(fill())
    view = _run(capsys, "inspect", name, "--groups", "--json", "--connection", url)
    assert (view["count"], view["waiting"]) == (2, 3)
    assert view["groups"] == [
        {"id": "a", "waiting": 1, "active": 0, "status": "waiting"},
        {"id": "b", "waiting": 2, "active": 0, "status": "paused"},
    ]
    assert main(["inspect", name, "--groups", "--connection", url]) == 0
    table = capsys.readouterr().out
    assert "2 groups, 3 jobs waiting in them" in table
    line = next(line for line in table.splitlines() if " b " in f" {line} ")
    assert line.split()[1:4] == ["2", "0", "paused"]


def test_one_job_whole_with_its_logs(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = fresh_name("insp")
    ids = asyncio.run(fill_queue(url, name))
    job = _run(capsys, "inspect", name, "--job", ids["bad"], "--json", "--connection", url)
    assert job["state"] == "failed" and job["data"] == {"x": "<b>"}
    assert job["failed_reason"] == "boom" and job["attempts_made"] == 1
    assert job["logs"] == ["tried once"]
    done = _run(capsys, "inspect", name, "--job", ids["done"], "--json", "--connection", url)
    assert done["returnvalue"] == {"ok": 1}
    assert main(["inspect", name, "--job", ids["bad"], "--connection", url]) == 0
    assert "boom" in capsys.readouterr().out


def test_actions_change_the_store(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = fresh_name("insp")
    ids = asyncio.run(fill_queue(url, name))
    args = ["--connection", url, "--json"]
    assert _run(capsys, "queue", "pause", name, *args)["paused"] is True
    assert {row["name"]: row["paused"] for row in _run(capsys, "inspect", *args)}[name] is True
    assert _run(capsys, "queue", "resume", name, *args)["paused"] is False
    assert _run(capsys, "queue", "retry", name, "--yes", *args)["retried"] == 1
    assert _run(capsys, "queue", "promote", name, *args)["promoted"] == 1
    assert _counts(url, name) == {"waiting": 4, "delayed": 0, "completed": 1, "failed": 0}
    assert _run(capsys, "queue", "clean", name, "--yes", *args)["removed"] == 1
    assert _run(capsys, "queue", "remove", name, "--job", ids["later"], *args)["removed"]
    assert _run(capsys, "queue", "drain", name, "--yes", *args)["removed"] == 4  # and urgent
    assert _counts(url, name) == {"waiting": 0, "delayed": 0, "completed": 0, "failed": 0}
    assert _run(capsys, "queue", "obliterate", name, "--yes", *args)["obliterated"] is True
    names = [row["name"] for row in _run(capsys, "inspect", *args)]
    assert name not in names


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["inspect", "{q}", "--state", "sleeping"], "sleeping"),
        (["inspect", "{q}", "--job", "no-such-job"], "no-such-job"),
        (["inspect", "{q}-missing"], "-missing"),
        (["queue", "drain", "{q}"], "--yes"),
        (["queue", "remove", "{q}"], "--job"),
        (["queue", "remove", "{q}", "--job", "404"], "404"),
        (["queue", "retry", "{q}", "--state", "waiting", "--yes"], "waiting"),
        (["queue", "clean", "{q}", "--state", "active", "--yes"], "active"),
    ],
)
def test_bad_input_exits_2_naming_the_value(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db?durability=durable"
    name = fresh_name("insp")
    asyncio.run(fill_queue(url, name))
    capsys.readouterr()
    assert main([part.format(q=name) for part in argv] + ["--connection", url]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1


def test_an_unreachable_store_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--connection", "redis://127.0.0.1:1/0"]) == 2
    err = capsys.readouterr().err
    assert "127.0.0.1:1" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["inspect"], ["queue", "pause", "emails"]])
def test_a_missing_database_is_named_and_nothing_is_created(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    url = f"sqlite:///{tmp_path}/missing.db"
    assert main([*argv, "--connection", url]) == 2
    err = capsys.readouterr().err
    assert "no database at" in err and "missing.db" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # neither the file nor its lock file
