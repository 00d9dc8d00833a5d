"""One `sqlite:///` file shared by the processes of one host through its owner
(sqlite/sharing/): real processes, real sockets. Fault tests count outcomes: every
acknowledged durable add must be in the file after (lost == 0)."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import psyq
from psyq.backends.base import NewJob
from psyq.backends.engine import MemoryBackend
from psyq.backends.server.client import ServerBackend
from psyq.backends.server.connection import ClientConnection
from psyq.backends.server.server import Server
from psyq.backends.sqlite.sharing.server import share_address
from tests.engine.test_engine import waiting
from tests.polling import eventually, eventually_sync
from tests.server.server_proc import ROOT
from tests.server.test_processes import runs_per_job, start_workers, stop_workers
from tests.sqlite.test_file_owner import add_from_child


class Child:
    """A `tests.sqlite.shared_procs` process whose output lines a thread collects."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.sqlite.shared_procs", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.err: str | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def acked(self) -> list[str]:
        return [line.split()[1] for line in list(self.lines) if line.startswith("added ")]

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 30) -> None:
        """Until `check()` holds; fails (with the child's last lines and stderr) past
        `timeout`, or at once when the child exits first."""
        try:
            eventually_sync(lambda: check() or self.proc.poll() is not None, what, timeout)
        except AssertionError as late:
            pytest.fail(f"{late}: {self.lines[-3:]} {self.stderr()}")
        if not check():
            pytest.fail(f"{what}, the child exited: {self.lines[-3:]} {self.stderr()}")

    def wait_for_acks(self, count: int, what: str) -> None:
        self.wait_for(lambda: len(self.acked()) >= count, what)

    def end(self, how: int) -> int:
        """Signal the child (unless it exited), wait for it, keep its stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(how)
        code = self.proc.wait(30)
        self._reader.join(10)
        if self.err is None:
            assert self.proc.stdout is not None and self.proc.stderr is not None
            self.err = self.proc.stderr.read()
            self.proc.stderr.close()
            self.proc.stdout.close()
        return code

    def stderr(self) -> str:
        self.end(signal.SIGKILL)
        return self.err or ""


def stored_ids(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM jobs")}
    finally:
        conn.close()


async def test_worker_processes_on_the_app_s_file_run_every_job_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    logs = tmp_path / "runs"
    logs.mkdir()
    total = 1000
    async with psyq.Queue("work", connection=url) as queue:  # this process owns the file
        workers = start_workers(3, url, "work", logs)
        try:
            await queue.add_bulk([{"name": "x", "data": {"i": i}} for i in range(total)])

            async def all_completed() -> bool:
                return (await queue.get_job_counts("completed"))["completed"] == total

            await eventually(all_completed, "the worker processes finishing", 60)
        finally:
            stop_workers(workers)
    runs = runs_per_job(logs)
    assert len(runs) == total, f"{total - len(runs)} jobs never ran"
    assert {job for job, count in runs.items() if count > 1} == set()


@pytest.mark.parametrize(
    "how", [signal.SIGKILL, signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "kill-9-again", "term"]
)
def test_the_owner_going_under_load_loses_no_acknowledged_add(tmp_path: Path, how: int) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"
    owner = Child("load", url)
    owner.wait_for(lambda: "ready owner" in owner.lines, "the owner did not start")
    peers = [Child("load", url) for _ in range(2)]
    try:
        for peer in peers:
            peer.wait_for_acks(100, "a peer's adds were not acknowledged")
        assert owner.end(how) == (-how if how == signal.SIGKILL else 0)
        before = [len(peer.acked()) for peer in peers]
        for peer, count in zip(peers, before, strict=True):
            peer.wait_for_acks(count + 100, "no new owner took over")
    finally:
        codes = [peer.end(signal.SIGKILL) for peer in peers]
    acked = set(owner.acked()).union(*(peer.acked() for peer in peers))
    lost = acked - stored_ids(path)
    unknown = [line for peer in peers for line in peer.lines if line.startswith("unknown")]
    print(f"durable adds acknowledged {len(acked)}, lost {len(lost)}, unknown {len(unknown)}")
    assert all("connection to its owner closed" in line for line in unknown), unknown
    assert codes == [-signal.SIGKILL] * 2
    assert lost == set()
    took_over = [peer for peer in peers if "took it over" in peer.stderr()]
    assert len(took_over) == 1


def test_a_graceful_exit_hands_the_file_over_without_a_failed_call(tmp_path: Path) -> None:
    """The owner's SIGTERM (its worker, then its queue closed): the peers' calls in flight
    are answered, one peer takes the file at once, the other goes on through it."""
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"
    owner = Child("busy", url)
    owner.wait_for(lambda: "ready owner" in owner.lines, "the owner did not start")
    peers = [Child("busy", url) for _ in range(2)]
    try:
        for peer in peers:
            peer.wait_for_acks(100, "a peer's adds were not acknowledged")
        assert owner.end(signal.SIGTERM) == 0, owner.err
        before = [len(peer.acked()) for peer in peers]
        for peer, count in zip(peers, before, strict=True):
            peer.wait_for_acks(count + 100, "the peers did not go on after the owner's exit")
        gaps = [longest_gap(peer, count) for peer, count in zip(peers, before, strict=True)]
    finally:
        codes = [peer.end(signal.SIGTERM) for peer in peers]  # a second graceful handover
    unknown = [line for child in (owner, *peers) for line in child.lines if "unknown" in line]
    assert unknown == []
    assert codes == [0, 0], [peer.err for peer in peers]
    acked = [job for child in (owner, *peers) for job in child.acked()]
    assert len(acked) == len(set(acked))
    assert set(acked) <= stored_ids(path)
    runs = [line.split()[1] for c in (owner, *peers) for line in c.lines if line[:5] == "done "]
    assert len(runs) == len(set(runs)), "a job ran twice"
    assert any("took it over" in (peer.err or "") for peer in peers)
    assert max(gaps) < 5.0, gaps  # loose: no reconnect backoff, no connect timeout


def test_a_graceful_handover_keeps_the_peers_jobs_locked(tmp_path: Path) -> None:
    """A job running in a peer's worker when the owner closes is not returned by the new
    owner's first stalled check (another peer would run it a second time)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    owner = Child("idle", url)
    owner.wait_for(lambda: "ready owner" in owner.lines, "the owner did not start")
    slow = Child("slow", url, "3")  # stalled checks every 200 ms, as the other's
    other: Child | None = None
    try:
        slow.wait_for(lambda: "ready" in slow.lines, "the slow peer's worker did not start")
        adder = Child("add", url, "1")
        assert adder.end(0) == 0, adder.err
        [job] = adder.acked()
        slow.wait_for(lambda: f"start {job}" in slow.lines, "the slow peer did not start it")
        other = Child("work", url)
        other.wait_for(lambda: "ready" in other.lines, "the other peer's worker did not start")
        assert owner.end(signal.SIGTERM) == 0, owner.err
        slow.wait_for(lambda: f"done {job}" in slow.lines, "the slow peer did not finish it")
        time.sleep(0.5)  # sleep: the other peer's stalled checks run meanwhile, not the job
    finally:
        for child in (slow, other):
            if child is not None:
                child.end(signal.SIGTERM)
    assert f"done {job}" not in other.lines, "the job ran a second time in the other peer"


def longest_gap(child: Child, count: int) -> float:
    """The longest time between two of the child's acknowledged adds around its
    `count`-th (the owner's exit), in seconds."""
    stamps = [float(line.split()[2]) for line in list(child.lines) if line.startswith("added ")]
    around = stamps[max(0, count - 20) :]
    return max(later - earlier for earlier, later in itertools.pairwise(around))


@pytest.mark.parametrize("version", [4, 3], ids=["told", "older client"])
async def test_a_draining_server_answers_what_it_read_and_the_blocked_calls(
    version: int,
) -> None:
    """The server side of a graceful handover (Server.drain): a version 4 client is told
    (`bye`) and every call it sent before it half-closed is answered; an older client is
    not told, and the server does not wait for it. A blocked call is answered at once."""
    engine = MemoryBackend(f"memory://drain-{version}")  # a URL's engine is shared
    server = Server(engine)
    host, port = await server.start("127.0.0.1", 0)
    client = ServerBackend(f"psyq://{host}:{port}?connect_timeout=0.2&pool=1")
    client._version = version
    try:
        await client.now_ms()
        blocked = asyncio.ensure_future(client.wait_for_job("q", 60_000))
        await eventually(lambda: waiting(engine, "q"), "the wait blocked on the server")
        adds = [client.add_jobs("q", [NewJob("x", str(i), {})]) for i in range(50)]
        added = asyncio.gather(*adds, return_exceptions=True)  # in flight as the drain starts
        started = time.monotonic()
        await server.drain(30)
        assert time.monotonic() - started < 10  # not the 30 s timeout
        await asyncio.wait_for(blocked, 5)  # woken: it does not wait out its 60 s
        if version == 4:
            outcomes = await asyncio.wait_for(added, 5)
            assert [type(outcome) for outcome in outcomes] == [list] * 50
            assert await server.backend.get_job_counts("q", ["waiting"]) == {"waiting": 50}
            with pytest.raises(psyq.ConnectionError):  # no new server: a new connection
                await client.now_ms()
    finally:
        await server.close()
        outcomes = await asyncio.wait_for(added, 5)  # an older client's: unread ones fail
        await client.close()
    assert {type(outcome) for outcome in outcomes} <= {list, psyq.ConnectionError}


def test_a_peer_that_takes_over_runs_the_jobs_the_dead_owner_held(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    owner = Child("hold", url, "20")
    owner.wait_for(lambda: "holding" in owner.lines, "the owner did not start its jobs")
    peer = Child("work", url)
    try:
        peer.wait_for(lambda: "ready" in peer.lines, "the peer's worker did not start")
        owner.end(signal.SIGKILL)

        def done() -> set[str]:
            return {line for line in peer.lines if line.startswith("done ")}

        peer.wait_for(lambda: len(done()) == 20, "the held jobs did not come back")
    finally:
        peer.end(signal.SIGTERM)
    assert "took it over" in peer.stderr()


async def test_a_process_that_took_the_file_over_runs_its_calls_on_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    owner = Child("hold", url, "2")
    owner.wait_for(lambda: "holding" in owner.lines, "the owner did not start its jobs")
    async with psyq.Queue("shared", connection=url) as queue:
        first = await queue.add("x", {}, {"durable": True})  # committed by the owner
        owner.end(signal.SIGKILL)
        for _ in range(3):  # a call sent before this process saw the owner die fails
            try:
                await queue.count()
                break
            except psyq.ConnectionError:
                continue

        def through_the_socket(*args: object) -> None:
            raise AssertionError("a call of the new owner went through its own socket")

        monkeypatch.setattr(ClientConnection, "request", through_the_socket)
        monkeypatch.setattr(ClientConnection, "add_jobs", through_the_socket)
        second = await queue.add("x", {})
        for job in (first, second):
            found = await queue.get_job(job.id)
            assert found is not None and await found.get_state() == "waiting"


def test_processes_opening_at_once_agree_on_one_owner(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    children = [Child("add", f"sqlite:///{path}", "30") for _ in range(4)]
    codes = [child.end(0) for child in children]
    assert codes == [0] * 4, [child.stderr() for child in children]
    acked = [job for child in children for job in child.acked()]
    assert len(acked) == len(set(acked)) == 120
    unknown = sum(line.startswith("unknown") for child in children for line in child.lines)
    stored = stored_ids(path)
    assert set(acked) <= stored and len(stored) <= 120 + unknown  # an owner's exit: unknown


REFUSALS = {
    "share=off": ("share=off", "in use by pid {pid}"),
    "other settings": ("durability=durable", "with durability=buffered"),
}


@pytest.mark.parametrize(("query", "said"), REFUSALS.values(), ids=REFUSALS.keys())
async def test_a_second_process_is_refused_saying_why(
    tmp_path: Path, query: str, said: str
) -> None:
    path = tmp_path / "jobs.db"
    async with psyq.Queue("q", connection=f"sqlite:///{path}") as queue:
        await queue.add("n", {})
        answer = await asyncio.to_thread(add_from_child, f"sqlite:///{path}?{query}")
        assert answer.startswith("PsyqError: ") and said.format(pid=os.getpid()) in answer
        assert await queue.count() == 1


async def test_a_peer_of_an_owner_that_serves_none_gives_up_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with psyq.Queue("q", connection=f"sqlite:///{path}?share=off") as queue:
        await queue.add("n", {})
        # bounded: the child gives up after CONNECT_TIMEOUT_S (add_from_child allows 60 s)
        answer = await asyncio.to_thread(add_from_child, f"sqlite:///{path}")
    assert answer.startswith("PsyqError: cannot reach sqlite:///"), answer
    assert "its owner does not answer on its local socket" in answer, answer


async def test_psyq_inspect_works_from_another_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    async with psyq.Queue("seen", connection=url) as queue:
        await queue.add("n", {})
        command = [sys.executable, "-m", "psyq", "inspect", "--connection", url]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    assert "seen" in done.stdout


# Connects to the owner's socket as another user; prints what the server did.
KNOCK = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(5)
name = sys.argv[1]  # "@..." for an abstract address (a NUL cannot be an argument)
sock.connect("\\0" + name[1:] if name.startswith("@") else name)
try:
    print("closed" if sock.recv(1) == b"" else "answered")
except ConnectionResetError:
    print("closed")
except TimeoutError:
    print("kept open")
"""


SYSTEM_PYTHON = "/usr/bin/python3"  # one another user may run (only the stdlib is needed)


@pytest.mark.skipif(
    os.getuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
    reason="needs root (to run a child as another user) and /usr/bin/python3",
)
async def test_another_user_is_not_served(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with psyq.Queue("q", connection=f"sqlite:///{path}") as queue:
        await queue.add("n", {})
        found = os.stat(path)
        address = share_address(str(path), (found.st_dev, found.st_ino))
        command = [SYSTEM_PYTHON, "-c", KNOCK, address.replace("\0", "@", 1)]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, timeout=30, user=65534
        )
    assert done.stdout.strip() == "closed", done.stderr
