"""Bad input against a real `psyq server` process: each bad client gets an error naming the
problem (or its connection closed) while a well-behaved client keeps being served."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgpack
import pytest

import psyq
from psyq.backends.engine import MemoryBackend
from psyq.backends.server import ServerBackend
from psyq.backends.server.codec import decode, frame
from psyq.backends.server.framing import FrameBuffer
from psyq.backends.server.protocol import HEADER, PROTOCOL_VERSION
from tests.server.server_proc import ServerProcess, start_server

FRAME_TIMEOUT = 0.5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("faults")
    proc = start_server(
        folder / "server.log",
        "--data",
        "memory",
        "--max-frame",
        "65536",
        "--frame-timeout",
        str(FRAME_TIMEOUT),
        "--max-in-flight",
        "16",
    )
    yield proc
    proc.stop()


class RawClient:
    """A hand-driven connection: write any bytes, read answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames = FrameBuffer()
        self.ready: list[dict[str, Any]] = []

    @classmethod
    async def connect(cls, server: ServerProcess, hello: bool = True) -> RawClient:
        client = cls(*await asyncio.open_connection(server.host, server.port))
        if hello:
            answer = await client.ask({"id": 1, "op": "hello", "args": [PROTOCOL_VERSION, None]})
            assert answer["ok"]["server"] == "psyq"
        return client

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        await self.send(frame(message))
        return await self.answer()

    async def answer(self, timeout: float = 5) -> dict[str, Any]:
        while not self.ready:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise EOFError("the server closed the connection")
            self.ready += [decode(body) for body in self.frames.feed(data)]
        return self.ready.pop(0)

    async def closed_by_server(self, timeout: float = 5) -> bool:
        """True once the server closes (any answers before that are skipped)."""
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


@pytest.fixture
async def bystander(server: ServerProcess) -> AsyncIterator[psyq.Queue]:
    """A well-behaved client that must not notice the others' trouble."""
    queue = psyq.Queue(f"bystander-{id(server)}", connection=server.url)
    await queue.add("before", {})
    yield queue
    job = await queue.add("after", {})  # still served
    assert (await queue.get_job(job.id)) is not None
    await queue.close()


async def _error_then_close(client: RawClient, named: str) -> None:
    answer = await client.answer()
    assert named in str(answer["err"])
    assert await client.closed_by_server()
    await client.close()


async def test_huge_length_prefix_is_refused(server: ServerProcess, bystander: Any) -> None:
    client = await RawClient.connect(server)
    await client.send(HEADER.pack(0xFFFFFFF0))
    await _error_then_close(client, f"frame of {0xFFFFFFF0} bytes exceeds the limit of 65536")


async def test_invalid_messagepack(server: ServerProcess, bystander: Any) -> None:
    client = await RawClient.connect(server)
    await client.send(HEADER.pack(2) + b"\xc1\xc1")
    await _error_then_close(client, "invalid MessagePack")


async def test_non_map_body(server: ServerProcess, bystander: Any) -> None:
    client = await RawClient.connect(server)
    body = msgpack.packb(["get_job", "q", "1"])
    await client.send(HEADER.pack(len(body)) + body)
    await _error_then_close(client, "a message is a map, got list")


async def test_deep_nesting(server: ServerProcess, bystander: Any) -> None:
    client = await RawClient.connect(server)
    body = b"\x91" * 50_000 + b"\xc0"
    await client.send(HEADER.pack(len(body)) + body)
    await _error_then_close(client, "invalid MessagePack")


async def test_truncated_frame_then_eof(server: ServerProcess, bystander: Any) -> None:
    client = await RawClient.connect(server)
    body = frame({"id": 5, "op": "get_job", "args": ["q", "1"]})
    await client.send(body[: len(body) // 2])
    client.writer.write_eof()
    assert await client.closed_by_server()
    await client.close()


async def test_slow_partial_frame_is_cut_off_others_are_served(
    server: ServerProcess, bystander: psyq.Queue
) -> None:
    slow = await RawClient.connect(server)
    data = frame({"id": 5, "op": "get_job", "args": ["q", "1"]})
    await slow.send(data[:7])
    for _ in range(20):  # meanwhile, another client is served without delay
        await bystander.get_job_counts()
    await _error_then_close(slow, "a frame stayed incomplete")


async def test_unknown_command_answers_and_keeps_the_connection(server: ServerProcess) -> None:
    client = await RawClient.connect(server)
    answer = await client.ask({"id": 7, "op": "__import__", "args": ["os"]})
    assert answer["id"] == 7
    assert "unknown command '__import__'" in str(answer["err"])
    answer = await client.ask({"id": 8, "op": "open", "args": []})
    assert "unknown command 'open'" in str(answer["err"])
    assert "ok" in await client.ask({"id": 9, "op": "list_queues", "args": []})
    await client.close()


async def test_wrong_argument_types_are_named(server: ServerProcess) -> None:
    client = await RawClient.connect(server)
    answer = await client.ask({"id": 3, "op": "get_job", "args": [42, "1"]})
    assert "get_job: argument 'queue' must be str, got 42" in str(answer["err"])
    answer = await client.ask({"id": 4, "op": "add_jobs", "args": ["q", [{"name": "x"}]]})
    assert "argument 'jobs' must be a list of NewJob" in str(answer["err"])
    answer = await client.ask({"id": 5, "op": "pause", "args": "q"})
    assert "pause: args must be a list, got 'q'" in str(answer["err"])
    answer = await client.ask({"id": 6, "op": "pause", "args": []})
    assert "pause takes 1 to 1 arguments" in str(answer["err"])
    answer = await client.ask({"id": "x", "op": "pause", "args": ["q"]})
    assert "a request needs an integer id, got 'x'" in str(answer["err"])
    await client.close()


async def test_requests_before_hello_are_refused(server: ServerProcess) -> None:
    client = await RawClient.connect(server, hello=False)
    await client.send(frame({"id": 1, "op": "list_queues", "args": []}))
    await _error_then_close(client, "the first request must be hello, got 'list_queues'")


async def test_wrong_protocol_version_is_refused(server: ServerProcess) -> None:
    client = await RawClient.connect(server, hello=False)
    await client.send(frame({"id": 1, "op": "hello", "args": [999, None]}))
    await _error_then_close(client, "protocol version 999 is not supported")


async def test_pipelined_answers_match_their_ids(server: ServerProcess, queue_name: str) -> None:
    client = await RawClient.connect(server)
    # a blocked wait is answered after the quick requests sent behind it
    await client.send(frame({"id": 10, "op": "wait_for_job", "args": [queue_name, 2000]}))
    await client.send(b"".join(frame({"id": i, "op": "now_ms", "args": []}) for i in range(11, 15)))
    ids = [(await client.answer())["id"] for _ in range(4)]
    assert sorted(ids) == [11, 12, 13, 14]
    async with psyq.Queue(queue_name, connection=server.url) as queue:
        await queue.add("wake", {})
    assert (await client.answer())["id"] == 10  # pushed when the job arrived
    await client.close()


async def test_server_errors_come_back_as_the_same_type(
    server: ServerProcess, queue_name: str
) -> None:
    local = MemoryBackend("memory://local-errors")
    remote = ServerBackend(server.url)
    await remote.open()
    try:
        for backend in (local, remote):
            with pytest.raises(psyq.JobNotFoundError) as caught:
                await backend.update_data(queue_name, "404", "{}")
            assert str(caught.value) == "job '404' not found in queue " + repr(queue_name)
            assert caught.value.job_id == "404"
    finally:
        await remote.close()


async def test_too_many_in_flight_requests_wait_their_turn(
    server: ServerProcess, queue_name: str
) -> None:
    client = await RawClient.connect(server)
    blocked = [frame({"id": i, "op": "wait_for_job", "args": [queue_name, 500]}) for i in range(40)]
    await client.send(b"".join(blocked))  # the server reads 16 at a time (--max-in-flight)
    ids = [(await client.answer(timeout=10))["id"] for _ in range(40)]
    assert sorted(ids) == list(range(40))
    await client.close()


async def test_cancel_stops_a_blocked_request(server: ServerProcess, queue_name: str) -> None:
    client = await RawClient.connect(server)
    await client.send(frame({"id": 20, "op": "wait_for_job", "args": [queue_name, 60_000]}))
    await client.send(frame({"id": 0, "op": "cancel", "args": [20]}))
    assert (await client.ask({"id": 21, "op": "now_ms", "args": []}))["id"] == 21
    async with psyq.Queue(queue_name, connection=server.url) as queue:
        await queue.add("wake", {})  # would have answered the wait, had it not been cancelled
    assert (await client.ask({"id": 22, "op": "now_ms", "args": []}))["id"] == 22
    await client.close()
