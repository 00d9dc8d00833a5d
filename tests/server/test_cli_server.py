"""`psyq server` on the command line: bad options, and sharing an SQLite file through it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import psyq
from psyq.cli.main import main
from tests.polling import eventually, eventually_sync
from tests.server.server_proc import start_server
from tests.sqlite.test_file_owner import PSYQ, read_only_folder, run_where_read_only

__all__ = ["read_only_folder"]  # a fixture of tests/sqlite/test_file_owner.py, used here


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["server", "--data", "redis://x"], "redis://x"),
        (["server", "--data", "memory", "--tls-cert", "c.pem"], "--tls-key"),
        (["server", "--data", "memory", "--tls-cert", "no.pem", "--tls-key", "no.key"], "no.pem"),
    ],
)
def test_bad_options_exit_2_naming_the_value(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert named in capsys.readouterr().err


async def test_the_server_owns_its_sqlite_file_and_shares_it(
    tmp_path: Path, queue_name: str
) -> None:
    db = tmp_path / "jobs.db"
    server = start_server(tmp_path / "server.log", "--data", str(db))
    try:
        with pytest.raises(psyq.PsyqError, match="psyq server --data"):
            async with psyq.Queue(queue_name, connection=f"sqlite:///{db}?share=off") as queue:
                await queue.add("x", {})
        async with psyq.Queue(queue_name, connection=server.url) as queue:
            job = await queue.add("x", {"kept": True})
        async with psyq.Queue(queue_name, connection=f"sqlite:///{db}") as queue:
            stored = await queue.get_job(job.id)  # through its socket
            assert stored is not None and stored.data == {"kept": True}
    finally:
        assert server.stop() == 0  # SIGTERM: a clean exit that flushes the file
    async with psyq.Queue(queue_name, connection=f"sqlite:///{db}") as queue:
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.data == {"kept": True}


@pytest.mark.parametrize(("choice", "loop"), [("auto", "uvloop"), ("asyncio", "asyncio")])
def test_the_server_runs_on_uvloop_when_installed(
    choice: str, loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PSYQ_LOOP", choice)  # auto: uvloop, installed with the test extra
    log = tmp_path / "server.log"
    server = start_server(log, "--data", "memory")
    try:
        eventually_sync(lambda: f", {loop} loop" in log.read_text(), f"the log naming {loop}")
    finally:
        assert server.stop() == 0


def test_a_bad_loop_choice_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PSYQ_LOOP", "trio")
    assert main(["server", "--data", "memory", "--port", "0"]) == 2
    assert "PSYQ_LOOP must be auto, uvloop or asyncio, got 'trio'" in capsys.readouterr().err


def test_a_read_only_folder_is_one_line_and_exit_2(read_only_folder: Path) -> None:
    """The store's PsyqError (tests/sqlite/test_file_owner.py) is the server's one line."""
    path = read_only_folder / "jobs.db"
    argv = [PSYQ, "server", "--data", str(path), "--port", "0"]
    done = run_where_read_only(read_only_folder, argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"psyq server: cannot open {path}: "), done.stderr
    assert "listening" not in done.stdout


async def test_a_stopped_server_answers_every_call_it_was_sent(
    tmp_path: Path, queue_name: str
) -> None:
    """SIGTERM under 40 producers adding durably over two connections: every acknowledged
    add is stored and every add that failed is not (the server answers the calls it read
    before it closes; a call sent after its bye goes to no one and fails)."""
    db = tmp_path / "jobs.db"
    server = start_server(tmp_path / "server.log", "--data", str(db), "--durability", "durable")
    url = f"{server.url}?connect_timeout=0.5"
    acknowledged: set[str] = set()
    failed: set[str] = set()

    async def produce(queue: psyq.Queue, name: str) -> None:
        for n in range(1_000_000):
            job_id = f"{name}-{n}"
            try:
                await queue.add("x", None, {"jobId": job_id})
            except psyq.errors.ConnectionError:
                failed.add(job_id)
                return
            acknowledged.add(job_id)

    queues = [psyq.Queue(queue_name, connection=url) for _ in range(2)]
    try:
        producers = [
            asyncio.ensure_future(produce(queue, f"q{q}p{p}"))
            for q, queue in enumerate(queues)
            for p in range(20)
        ]
        every = {f"q{q}p{p}" for q in range(2) for p in range(20)}
        await eventually(lambda: {i.rsplit("-", 1)[0] for i in acknowledged} == every, "all adding")
        assert await asyncio.to_thread(server.stop) == 0
        await asyncio.wait_for(asyncio.gather(*producers), 30)
    finally:
        for queue in queues:
            await queue.close()
        server.stop()
    async with psyq.Queue(queue_name, connection=f"sqlite:///{db}") as queue:
        stored = {job.id for job in await queue.get_jobs(["waiting"], 0, -1)}
    assert len(failed) == 40 and acknowledged  # every producer ran until the server left
    assert acknowledged <= stored
    assert failed.isdisjoint(stored), f"{len(failed & stored)} adds failed but were stored"
