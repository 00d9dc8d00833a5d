"""Health probes (`--health-port`: GET /healthz, /readyz) of `psyq worker`, `psyq server`
and `psyq dashboard`, and `psyq check URL` (issue 39). The worker's test stops its Redis
(the test's own redis-server) and starts it again: /readyz fails past the unreachable limit
and comes back, /healthz stays up."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from psyq.cli.health import Health, HealthLimits
from psyq.cli.main import main
from tests.polling import eventually, eventually_sync
from tests.redis_service import RedisProcess, free_ports
from tests.server.server_proc import start_server

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 30  # a deadline, not a figure asserted


def _get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET `path`; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def _wait_status(port: int, path: str, status: int) -> str:
    """The body of `path` once it answers `status`."""

    def answered() -> list[str]:
        got, body = _get(port, path)
        return [body] if got == status else []

    return eventually_sync(answered, f"{path} answering {status}", LIMIT_S, interval=0.1)[0]


def _start(*args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_ports(1)[0]
    probes = ("--health-port", str(port), "--health-host", "127.0.0.1")
    command = [sys.executable, "-m", "psyq", *args, *probes]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_worker_is_ready_only_while_its_store_answers(redis_process: RedisProcess) -> None:
    proc, port = _start(
        "worker",
        "tests.cli.procs:slow_job",
        "--queue",
        "health",
        "--connection",
        redis_process.url,
        "--health-unreachable",
        "1",
    )
    try:
        assert _wait_status(port, "/readyz", 200) == "ok\n"
        redis_process.stop(signal.SIGKILL)
        assert "the store has failed" in _wait_status(port, "/readyz", 503)
        assert _get(port, "/healthz") == (200, "ok\n")
        redis_process.start()
        _wait_status(port, "/readyz", 200)
        assert _get(port, "/nothing")[0] == 404
    finally:
        assert _stop(proc) == 0


def test_a_server_serves_its_probes() -> None:
    proc, port = _start("server", "--data", "memory", "--port", "0")
    try:
        _wait_status(port, "/readyz", 200)
        assert _get(port, "/healthz") == (200, "ok\n")
    finally:
        assert _stop(proc) == 0


def test_a_server_whose_file_is_deleted_is_not_ready(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`psyq server --data F`: once F (with its -wal and -shm) is deleted nothing can be
    stored; /readyz and `psyq check psyq://...` must say so, naming why (issue 49)."""
    data = tmp_path / "jobs.db"
    port = free_ports(1)[0]
    probes = ("--health-port", str(port), "--health-host", "127.0.0.1")
    server = start_server(
        tmp_path / "server.log", "--data", str(data), *probes, "--health-unreachable", "1"
    )
    try:
        _wait_status(port, "/readyz", 200)
        assert main(["check", server.url]) == 0
        assert "(psyq) answers" in capsys.readouterr().out
        for path in (data, Path(f"{data}-wal"), Path(f"{data}-shm")):
            path.unlink(missing_ok=True)
        reason = _wait_status(port, "/readyz", 503)
        assert "the store has failed" in reason and f"{data} was deleted" in reason
        assert _get(port, "/healthz") == (200, "ok\n")
        assert main(["check", server.url]) == 1
        assert f"{data} was deleted" in capsys.readouterr().err
    finally:
        assert server.stop() == 0


def test_the_dashboard_serves_its_probes() -> None:
    pytest.importorskip("aiohttp", reason="the dashboard needs aiohttp (psyq[dashboard])")
    page = free_ports(1)[0]
    proc, port = _start("dashboard", "--connection", "memory://", "--port", str(page))
    try:
        _wait_status(port, "/readyz", 200)
    finally:
        _stop(proc)


async def test_healthz_fails_once_the_loop_stalled_past_the_limit() -> None:
    async def answers() -> None:
        return None

    health = Health(answers, lambda: True, HealthLimits(stall_s=0.3, unreachable_s=5))
    await health.start("127.0.0.1", 0)
    try:
        await eventually(lambda: health.live() == (True, "ok"), "live")
        time.sleep(0.8)  # sleep: a blocking call on the loop: the ticks are late
        live, reason = health.live()
        assert not live and "event loop stalled" in reason
        assert not health.ready()[0]
        await eventually(lambda: health.live() == (True, "ok"), "live once the loop turns again")
    finally:
        await health.close()


def test_check_says_why_a_store_cannot_be_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_ports(1)[0]
    assert main(["check", f"redis://127.0.0.1:{port}/0", "--timeout", "5"]) == 1
    assert f"127.0.0.1:{port}" in capsys.readouterr().err
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 999")
    assert main(["check", f"sqlite:///{newer}"]) == 1
    assert "newer than this psyq" in capsys.readouterr().err
    fine = tmp_path / "fine.db"
    sqlite3.connect(fine).close()  # an existing (empty) SQLite file: psyq can use it
    assert main(["check", f"sqlite:///{fine}"]) == 0
    assert "answers" in capsys.readouterr().out


def test_check_refuses_a_missing_sqlite_file_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo or an unmounted volume must fail an init container's check, not leave an
    empty database behind (issue 49)."""
    missing = tmp_path / "volume" / "missing.db"
    missing.parent.mkdir()
    for url in (f"sqlite:///{missing}", f"sqlite:///{missing}?durability=durable"):
        assert main(["check", url]) == 1
        err = capsys.readouterr().err
        assert str(missing) in err and "no such file" in err
    assert list(missing.parent.iterdir()) == []


def test_check_passes_on_a_running_redis(
    redis_process: RedisProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", redis_process.url]) == 0
    assert "(redis) answers" in capsys.readouterr().out
