"""Hostile clients against a real `psyq server` process: clients that never read their
answers, never speak, or send big frames without the token. Each test measures the
server's resident memory (RSS, from /proc) and prints the figures (`pytest -s`); the
bounds asserted are loose, the figures go to docs/reliability.md."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import resource
import signal
import struct
import termios
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.server.codec import frame
from psyq.backends.server.protocol import HEADER, PROTOCOL_VERSION
from psyq.backends.server.server import DRAIN_TIMEOUT_S, serve
from tests.polling import Deadline, eventually
from tests.server.server_proc import ServerProcess, start_server
from tests.server.test_faults import RawClient

TOKEN = "hostile-test-token"
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")


def rss_mib(server: ServerProcess) -> float:
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line")


async def settled_rss(server: ServerProcess, quiet: float = 0.3, deadline: float = 5) -> float:
    """The server's RSS once it stops changing by more than 1 MiB for `quiet` seconds."""
    end = Deadline("the server's RSS settling", deadline)
    last, since = rss_mib(server), time.monotonic()
    while not end.passed():
        await asyncio.sleep(0.05)  # sleep: the interval between two samples of the RSS
        now = rss_mib(server)
        if abs(now - last) > 1:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(
        tmp_path / "server.log",
        "--data",
        "memory",
        "--token",
        TOKEN,
        "--hello-timeout",
        "1",
        "--idle-timeout",
        "1.5",
        "--max-unsent",
        str(MIB),
        "--max-unsent-total",
        str(8 * MIB),
    )
    yield proc
    proc.stop()


async def hello(server: ServerProcess) -> RawClient:
    client = await RawClient.connect(server, hello=False)
    answer = await client.ask({"id": 1, "op": "hello", "args": [PROTOCOL_VERSION, TOKEN]})
    assert answer["ok"]["server"] == "psyq"
    return client


async def is_closed(client: RawClient, timeout: float) -> bool:
    """Whether the server closes the connection within `timeout` (answers are skipped)."""
    try:
        return await client.closed_by_server(timeout)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    finally:
        await client.close()


async def served(server: ServerProcess, queue_name: str) -> float:
    """A client with the token is served: the seconds it takes to connect and make a call."""
    started = time.monotonic()
    async with psyq.Queue(queue_name, connection=f"psyq://:{TOKEN}@{server.address}") as queue:
        await queue.get_job_counts()
        return time.monotonic() - started


async def test_big_frames_without_the_token_allocate_nothing(
    server: ServerProcess, queue_name: str
) -> None:
    before = rss_mib(server)
    clients = [await RawClient.connect(server, hello=False) for _ in range(6)]
    chunk = b"\0" * MIB
    for client in clients:  # a 60 MiB frame announced, 16 MiB of it sent
        client.writer.write(HEADER.pack(60 * MIB))
        for _ in range(16):
            client.writer.write(chunk)
    for client in clients:
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(client.writer.drain(), 5)
    grown = await settled_rss(server) - before
    closed = [await is_closed(client, 2) for client in clients]
    print(f"\n6 unauthenticated 60 MiB frames (16 MiB sent each): server grew {grown:.1f} MiB")
    assert all(closed)
    assert grown < 16
    assert await served(server, queue_name) < 5


async def test_a_closed_connection_frees_its_buffer_at_once(server: ServerProcess) -> None:
    """An authenticated client's partial big frame: its buffer goes with the connection,
    not when the garbage collector next runs."""
    before = rss_mib(server)
    client = await hello(server)
    client.writer.write(HEADER.pack(60 * MIB))
    client.writer.write(b"\0" * (24 * MIB))
    await client.writer.drain()
    held = await settled_rss(server) - before
    await client.close()
    await eventually(lambda: rss_mib(server) - before < 8, "its buffer freed", timeout=5)
    left = rss_mib(server) - before
    print(f"\na partial 60 MiB frame (24 MiB sent): held {held:.1f} MiB, {left:.1f} after close")
    assert held > 16  # the buffer was there (the test can see it)
    assert left < 8


async def test_silent_and_idle_connections_are_closed(
    server: ServerProcess, queue_name: str
) -> None:
    started = time.monotonic()
    silent = [await RawClient.connect(server, hello=False) for _ in range(20)]
    idle = await hello(server)
    for client in silent:
        assert await client.closed_by_server(timeout=5)
        await client.close()
    silent_closed = time.monotonic() - started
    assert await idle.closed_by_server(timeout=5)
    await idle.close()
    idle_closed = time.monotonic() - started
    print(
        f"\n20 silent connections closed after {silent_closed:.2f}s, an idle one {idle_closed:.2f}s"
    )
    assert silent_closed >= 0.9
    # a blocked call is not idle: a worker waiting for jobs keeps its connection
    waiting = await hello(server)
    waiting.writer.write(frame({"id": 2, "op": "wait_for_job", "args": [queue_name, 2200]}))
    assert (await waiting.answer(timeout=5))["id"] == 2
    await waiting.close()


async def test_silent_connections_do_not_lock_out_a_client(
    server: ServerProcess, queue_name: str
) -> None:
    """More silent connections than the server may open files: a client with the token is
    served once the hello timeout (1 s here) closes them."""
    resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (64, 64))
    silent = [await asyncio.open_connection(server.host, server.port) for _ in range(80)]
    try:
        took = await served(server, queue_name)
    finally:
        for _, writer in silent:
            writer.close()
    print(f"\n80 silent connections, 64 open files: a client with the token served in {took:.2f}s")


async def fill(server: ServerProcess, queue_name: str, jobs: int, size: int) -> None:
    url = f"psyq://:{TOKEN}@{server.address}"
    async with psyq.Queue(queue_name, connection=url) as queue:
        await queue.add_bulk([{"name": "big", "data": {"pad": "x" * size}} for _ in range(jobs)])


async def never_read(server: ServerProcess, queue_name: str, requests: int) -> RawClient:
    """A client that asks for every job `requests` times in one write and never reads."""
    client = await hello(server)
    args = [queue_name, ["waiting"], 0, -1, True]
    client.writer.write(
        b"".join(frame({"id": 10 + i, "op": "get_jobs", "args": args}) for i in range(requests))
    )
    return client


def unread_bytes(client: RawClient) -> int:
    """What reached the client's socket and waits there (FIONREAD): the stream reader
    stopped reading once its own buffer filled."""
    sock = client.writer.get_extra_info("socket")
    (count,) = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))
    return int(count)


async def test_answers_a_client_never_reads_are_bounded(
    server: ServerProcess, queue_name: str
) -> None:
    await fill(server, queue_name, 100, 4000)  # each answer about 400 KB
    before = rss_mib(server)
    clients = [await never_read(server, queue_name, 100) for _ in range(3)]  # 120 MB asked
    grown = await settled_rss(server) - before
    took = await served(server, queue_name)
    print(f"\n3 clients that never read (40 MB asked each): server grew {grown:.1f} MiB;")
    print(f"another client's call took {took * 1000:.0f} ms")
    for client in clients:
        await client.close()
    assert grown < 40


async def test_the_total_of_unread_answers_is_bounded(
    server: ServerProcess, queue_name: str
) -> None:
    """Past --max-unsent-total (8 MiB here), the connection that passes it is closed."""
    await fill(server, queue_name, 100, 4000)
    before = rss_mib(server)
    clients = [await never_read(server, queue_name, 30) for _ in range(12)]
    grown = await settled_rss(server) - before
    closed = sum([await is_closed(client, 0.5) for client in clients])
    print(f"\n12 clients that never read: server grew {grown:.1f} MiB, {closed} closed")
    assert closed >= 1
    assert grown < 60


async def test_a_closed_connection_leaves_no_cycle() -> None:
    """The connection object goes when its socket closes, not at the next garbage
    collection (its outbox's write callback referred back to it)."""
    backend = await open_backend("memory://")
    server, (host, port) = await serve(backend, "127.0.0.1", 0)
    gc.disable()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(frame({"id": 1, "op": "hello", "args": [PROTOCOL_VERSION, None]}))
        writer.write(frame({"id": 2, "op": "wait_for_job", "args": ["q", 5000]}))  # a task
        await reader.read(100)
        (conn,) = server.connections
        gone = weakref.ref(conn)
        del conn
        writer.close()
        await writer.wait_closed()
        # the cancelled wait's task ends a step after
        await eventually(
            lambda: not server.connections and gone() is None, "the connection gone", timeout=5
        )
    finally:
        gc.enable()
        await server.close()
        await release_backend(backend)


async def test_a_client_that_never_reads_holds_a_stopping_server_only_for_its_drain(
    server: ServerProcess, queue_name: str
) -> None:
    """SIGTERM answers what the clients sent before the server closes, for at most
    DRAIN_TIMEOUT_S: a client whose answers can never be written does not keep it up."""
    await fill(server, queue_name, 100, 4000)
    client = await never_read(server, queue_name, 100)
    # its requests read, its answers stuck: they fill the client's socket, unread
    await eventually(lambda: unread_bytes(client) > 0, "answers waiting in the client's socket")
    started = time.monotonic()
    code = await asyncio.to_thread(server.stop, signal.SIGTERM, DRAIN_TIMEOUT_S + 10)
    took = time.monotonic() - started
    await client.close()
    print(f"\nSIGTERM with a client that never reads: the server exited after {took:.2f}s")
    assert code == 0
    assert took < DRAIN_TIMEOUT_S + 3
