"""Find a PostgreSQL server for the tests, or start one (once per test session).

Order: `PSYQ_TEST_POSTGRES_URL`; else a server already answering on 127.0.0.1:5432; else a
throw-away cluster made with `initdb` and started with `pg_ctl` (binaries on PATH or under
/usr/lib/postgresql/*/bin) in a temp dir on a free port, stopped when the session ends.
Each session uses its own schema (`psyq_test_<hex>`), dropped at the end, so concurrent
runs by other people never see each other's rows.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

__all__ = [
    "PrivateCluster",
    "postgres_binaries",
    "session_schema",
    "start_postgres",
    "with_schema",
]

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/test"
_started: dict[str, str] = {}
SESSION_SCHEMA = f"psyq_test_{uuid.uuid4().hex[:12]}"


def postgres_binaries() -> tuple[str, ...]:
    """pg_ctl on PATH, then the ones Debian installs off PATH."""
    found = [shutil.which("pg_ctl") or ""]
    found += sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return tuple(path for path in found if path) or ("pg_ctl",)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_postgres(pg_ctl: str) -> str:
    """A server URL: the local one when it answers (unless PSYQ_TEST_POSTGRES_LOCAL=0), else
    a cluster started from `pg_ctl` (as the `postgres` user when we are root: initdb
    refuses to run as root)."""
    if "url" in _started:
        return _started["url"]
    if os.environ.get("PSYQ_TEST_POSTGRES_LOCAL", "1") != "0" and _answers("127.0.0.1", 5432):
        _started["url"] = LOCAL_URL
        return LOCAL_URL
    bin_dir = Path(pg_ctl).parent
    data = tempfile.mkdtemp(prefix="psyq-pg-")
    as_user = _run_as(data)
    port = _free_port()
    initdb = [str(bin_dir / "initdb"), "-D", data, "-A", "trust", "-U", "postgres"]
    subprocess.run([*as_user, *initdb], check=True, capture_output=True)
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    start = [pg_ctl, "-D", data, "-o", options, "-l", f"{data}/log", "-w", "start"]
    subprocess.run([*as_user, *start], check=True, capture_output=True)
    atexit.register(_stop, [*as_user, pg_ctl], data)
    _started["url"] = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    return _started["url"]


class PrivateCluster:
    """A PostgreSQL cluster of one test's own (initdb in a temp dir, a free port), which the
    test may restart or stop; nothing is shared with other tests or other people."""

    def __init__(self, pg_ctl: str) -> None:
        self.pg_ctl = pg_ctl
        self.data = tempfile.mkdtemp(prefix="psyq-pg-private-")
        self.port = _free_port()
        self._as_user = _run_as(self.data)
        initdb = str(Path(pg_ctl).parent / "initdb")
        self._run([initdb, "-D", self.data, "-A", "trust", "-U", "postgres"])

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, command: list[str]) -> None:
        subprocess.run([*self._as_user, *command], check=True, capture_output=True)

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        log = f"{self.data}/log"
        self._run([self.pg_ctl, "-D", self.data, "-o", options, "-l", log, "-w", *args])

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        """`pg_ctl stop -m fast`: sessions are cut, open transactions roll back."""
        self._ctl("-m", "fast", "stop")

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: sessions are cut, open transactions roll back."""
        self._ctl("-m", "fast", "restart")

    def destroy(self) -> None:
        subprocess.run(
            [*self._as_user, self.pg_ctl, "-D", self.data, "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(self.data, ignore_errors=True)


def _run_as(data: str) -> list[str]:
    """The command prefix that runs the server's tools as a non-root user."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root: initdb needs runuser and a 'postgres' user")
    shutil.chown(data, "postgres")
    return [runuser, "-u", "postgres", "--"]


def _stop(pg_ctl: list[str], data: str) -> None:
    subprocess.run([*pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True)
    shutil.rmtree(data, ignore_errors=True)


def with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def session_schema(url: str) -> str:
    """`url` with this session's schema (BullMQ 6's layout); dropped when the session ends."""
    if "schema" not in _started:
        _started["schema"] = SESSION_SCHEMA
        atexit.register(_drop_schema, url, SESSION_SCHEMA)
    return with_schema(url, SESSION_SCHEMA)


def _drop_schema(url: str, schema: str) -> None:
    if os.environ.get("PSYQ_KEEP_TEST_SCHEMA"):
        return
    import asyncio

    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(url)
        try:
            statement = await conn.fetchval(
                "SELECT format('DROP SCHEMA IF EXISTS %I CASCADE', $1::text)", schema
            )
            await conn.execute(statement)
        finally:
            await conn.close()

    with contextlib.suppress(Exception):  # the server may be gone already
        asyncio.run(drop())
