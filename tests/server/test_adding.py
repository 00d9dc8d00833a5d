"""Adds over psyq:// protocols 2, 3 and 6 (server/adding.py): the adds of one event-loop turn
travel as one add_batch request, each caller gets its own records or its own error, a lone
add leaves as soon as any request does (as an `add` request: without options on version 3,
with them too on version 6), records rebuilt from ids equal the server's, and version 1, 2
and 5 clients and servers still work with newer ones."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

import psyq
from psyq.backends.base import JobRecord, NewJob
from psyq.backends.engine import MemoryBackend
from psyq.backends.server import server_connection
from psyq.backends.server.adding import compact, rebuild_all
from psyq.backends.server.client import ServerBackend
from psyq.backends.server.codec import decode, frame
from psyq.backends.server.framing import FrameBuffer
from psyq.backends.server.protocol import ProtocolError
from psyq.backends.server.server import Server
from psyq.backends.server.server_connection import ServerConnection


class CountingServer:
    """An in-process server that counts the requests it starts, by command."""

    def __init__(self, server: Server, url: str) -> None:
        self.server, self.url = server, url
        self.requests: list[str] = []


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CountingServer]:
    server = Server(MemoryBackend("memory://adding"))
    host, port = await server.start("127.0.0.1", 0)
    counting = CountingServer(server, f"psyq://{host}:{port}")
    start_request = ServerConnection.start_request

    def counted(self: ServerConnection, request_id: int, op: Any, args: Any) -> None:
        counting.requests.append(op)
        start_request(self, request_id, op, args)

    monkeypatch.setattr(ServerConnection, "start_request", counted)
    yield counting
    await server.close()


async def raw_client(
    url: str,
) -> tuple[Callable[[dict[str, Any]], Awaitable[dict[str, Any]]], asyncio.StreamWriter]:
    """A bare connection: `ask` sends a message and returns the next answer."""
    reader, writer = await asyncio.open_connection(*url[len("psyq://") :].split(":"))
    frames = FrameBuffer()

    async def ask(message: dict[str, Any]) -> dict[str, Any]:
        writer.write(frame(message))
        while True:
            bodies = frames.feed(await reader.read(65536))
            if bodies:
                return decode(bodies[0])

    return ask, writer


async def test_adds_of_one_turn_travel_as_one_request(
    served: CountingServer, queue_name: str
) -> None:
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        await queue.get_job_counts()  # connected
        served.requests.clear()
        jobs = await asyncio.gather(*(queue.add("send", {"i": i}) for i in range(20)))
        assert served.requests == ["add_batch"]
        assert [job.data for job in jobs] == [{"i": i} for i in range(20)]
        assert len({job.id for job in jobs}) == 20
        stored = await queue.get_job(jobs[7].id)
        assert stored is not None and stored.data == {"i": 7}


async def test_each_caller_of_a_batch_gets_its_own_error(
    served: CountingServer, queue_name: str
) -> None:
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        await queue.get_job_counts()
        served.requests.clear()
        orphan = {"parent": {"id": "missing", "queue": f"bull:{queue_name}"}}
        results = await asyncio.gather(
            queue.add("a", {"n": 1}),
            queue.add("orphan", {"n": 2}, orphan),
            queue.add_bulk([{"name": "b", "data": i} for i in range(3)]),
            return_exceptions=True,
        )
        assert served.requests == ["add_batch"]
        first, refused, bulk = results
        assert isinstance(first, psyq.Job) and first.data == {"n": 1}
        assert isinstance(refused, psyq.JobNotFoundError)
        assert isinstance(bulk, list) and [job.data for job in bulk] == [0, 1, 2]
        counts = await queue.get_job_counts("waiting")
        assert counts == {"waiting": 4}  # the refused job was not written, the others were


async def test_an_argument_that_cannot_be_encoded_fails_only_its_caller(
    served: CountingServer, queue_name: str
) -> None:
    backend = ServerBackend(served.url)
    await backend.open()
    try:
        good = backend.add_jobs(queue_name, [NewJob("ok", "1", {})])
        bad = backend.add_jobs(queue_name, [NewJob("bad", "1", {"x": object()})])
        results = await asyncio.gather(good, bad, return_exceptions=True)
        assert isinstance(results[0], list) and results[0][0].name == "ok"
        assert isinstance(results[1], ProtocolError)
        assert "cannot encode" in str(results[1])
    finally:
        await backend.close()


async def test_a_cancelled_caller_leaves_the_others_their_answers(
    served: CountingServer, queue_name: str
) -> None:
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        await queue.get_job_counts()
        first = asyncio.ensure_future(queue.add("a", 1))
        second = asyncio.ensure_future(queue.add("b", 2))
        await asyncio.sleep(0)  # both joined the batch
        first.cancel()
        job = await second
        assert job.data == 2
        assert first.cancelled()


class RecordingTransport:
    """A connection's transport that records what is written, then writes it on the real
    one (uvloop's transports do not let a test replace their methods)."""

    def __init__(self, real: asyncio.Transport) -> None:
        self.real = real
        self.written: list[bytes] = []

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))
        self.real.write(data)

    def __getattr__(self, name: str) -> Any:  # is_closing, close, ...: the real transport's
        return getattr(self.real, name)


async def test_a_lone_add_is_written_without_waiting_for_company(
    served: CountingServer, queue_name: str
) -> None:
    backend = ServerBackend(served.url + "?pool=1")  # the add takes this same connection
    await backend.open()
    try:
        conn = await backend._connection()
        assert conn.version >= 3  # 3 brought `add`
        assert conn.transport is not None
        recording = RecordingTransport(conn.transport)
        written = recording.written
        conn.transport = recording  # type: ignore[assignment]
        future = asyncio.ensure_future(backend.add_jobs(queue_name, [NewJob("x", "1", {})]))
        for _ in range(2):  # the call runs, then the outbox writes at the end of that turn
            await asyncio.sleep(0)
        assert len(written) == 1
        [body] = FrameBuffer().feed(written[0])
        sent = decode(body)
        assert (sent["op"], sent["args"]) == ("add", [queue_name, "x", "1"])  # protocol 3
        [record_] = await future
        assert record_.name == "x"
    finally:
        await backend.close()


async def test_records_from_ids_equal_the_servers_records(
    served: CountingServer, queue_name: str
) -> None:
    backend = ServerBackend(served.url)
    await backend.open()
    try:
        jobs = [
            NewJob("plain", "1", {}),
            NewJob("delayed", "2", {"delay": 60_000}),
            NewJob("urgent", "3", {"priority": 5, "attempts": 3}),
            NewJob("stamped", "4", {}, 1_700_000_000_000),
        ]
        records = await backend.add_jobs(queue_name, jobs)
        assert [r.state for r in records] == ["waiting", "delayed", "prioritized", "waiting"]
        for record in records:
            stored = await backend.get_job(queue_name, record.id)
            assert stored is not None
            assert replace(record, state=None) == replace(stored, state=None)
    finally:
        await backend.close()


async def test_a_duplicate_comes_back_as_the_existing_record(
    served: CountingServer, queue_name: str
) -> None:
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        first = await queue.add("first", {"v": 1}, job_id="fixed")
        again = await queue.add("second", {"v": 2}, job_id="fixed")
        assert (again.id, again.name, again.data) == ("fixed", "first", {"v": 1})
        assert again.timestamp == first.timestamp


def test_compact_sends_whole_records_it_cannot_rebuild() -> None:
    new = NewJob("n", "1", {})
    plain = JobRecord("1", "q", "n", "1", new.opts, 5, state="waiting")
    changed = replace(plain, attempts_started=1)
    other = JobRecord("2", "q", "other", "9", {}, 5, state="waiting")
    entries = compact("q", [new, new, new], [plain, changed, other])
    assert entries == [["1", 5, "waiting"], changed, other]
    as_decoded = replace(plain, stacktrace=[])  # what decoding the whole record would give
    assert rebuild_all("q", [new, new, new], entries) == [as_decoded, changed, other]
    with pytest.raises(ProtocolError, match="bad entry"):
        rebuild_all("q", [new], [["1", "not a timestamp", None]])
    with pytest.raises(ProtocolError, match="expected 1 entries"):
        rebuild_all("q", [new], [])


async def test_a_version_1_client_still_adds_with_add_jobs(served: CountingServer) -> None:
    ask, writer = await raw_client(served.url)
    assert (await ask({"id": 1, "op": "hello", "args": [1, None]}))["ok"]["version"] == 1
    answer = await ask({"id": 2, "op": "add_jobs", "args": ["v1q", [NewJob("x", "1", {})]]})
    assert isinstance(answer["ok"][0], JobRecord)
    refused = await ask({"id": 3, "op": "add_batch", "args": [[["v1q", [["x", "1", {}, None]]]]]})
    assert "unknown command" in str(refused["err"])  # version 2's command, not on version 1
    writer.close()


async def test_a_lone_add_with_options_still_travels_as_add_batch_to_a_version_5_server(
    served: CountingServer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_connection, "SUPPORTED_VERSIONS", (1, 2, 3, 4, 5))
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        await queue.get_job_counts()
        served.requests.clear()
        plain = await queue.add("plain", {"v": 1})
        delayed = await queue.add("later", {"v": 2}, delay=60_000)
        assert served.requests == ["add", "add_batch"]
        assert (plain.name, plain.data, plain.opts) == ("plain", {"v": 1}, {})
        assert await plain.get_state() == "waiting"
        assert await delayed.get_state() == "delayed"
        stored = await queue.get_job(plain.id)
        assert stored is not None and stored.timestamp == plain.timestamp


async def test_a_lone_add_with_options_travels_as_add_on_version_6(
    served: CountingServer, queue_name: str
) -> None:
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        await queue.get_job_counts()
        served.requests.clear()
        grouped = await queue.add("grouped", {"v": 1}, group={"id": 7})
        delayed = await queue.add("later", {"v": 2}, delay=60_000, job_id="later-1")
        stamped = await queue.add("stamped", {"v": 3}, timestamp=1_700_000_000_000)
        assert served.requests == ["add", "add", "add_batch"]  # a timestamp: add_batch's
        assert (grouped.name, grouped.data, grouped.opts) == (
            "grouped",
            {"v": 1},
            {"group": {"id": "7"}},
        )
        assert (delayed.id, delayed.delay) == ("later-1", 60_000)
        assert [job.id for job in await queue.get_group_jobs("7")] == [grouped.id]
        for job, state in ((grouped, "waiting"), (delayed, "delayed"), (stamped, "waiting")):
            stored = await queue.get_job(job.id)
            assert stored is not None and await stored.get_state() == state
            assert (stored.opts, stored.timestamp, stored.delay) == (
                job.opts,
                job.timestamp,
                job.delay,
            )
        again = await queue.add("again", {"v": 4}, job_id="later-1")
        assert (again.name, again.timestamp) == ("later", delayed.timestamp)  # the duplicate


async def test_an_add_with_options_is_refused_before_version_6_or_with_bad_options(
    served: CountingServer,
) -> None:
    ask, writer = await raw_client(served.url)
    assert (await ask({"id": 1, "op": "hello", "args": [6, None]}))["ok"]["version"] == 6
    answer = await ask({"id": 2, "op": "add", "args": ["q6", "x", "{}", {"delay": 5000}]})
    assert answer["ok"][0] == "1" and answer["ok"][2] == "delayed"
    refused = await ask({"id": 3, "op": "add", "args": ["q6", "x", "{}", ["delay"]]})
    assert "[queue, name, data, opts]" in str(refused["err"]) and "['delay']" in str(refused["err"])
    writer.close()
    ask, writer = await raw_client(served.url)
    assert (await ask({"id": 1, "op": "hello", "args": [5, None]}))["ok"]["version"] == 5
    refused = await ask({"id": 2, "op": "add", "args": ["q5", "x", "{}", {"delay": 5000}]})
    assert "add takes [queue, name, data] (all text)" in str(refused["err"])
    writer.close()


async def test_a_bad_add_request_is_refused_naming_the_value(served: CountingServer) -> None:
    ask, writer = await raw_client(served.url)
    assert (await ask({"id": 1, "op": "hello", "args": [3, None]}))["ok"]["version"] == 3
    refused = await ask({"id": 2, "op": "add", "args": ["q3", "x", 5]})
    assert "add takes [queue, name, data]" in str(refused["err"]) and "5" in str(refused["err"])
    answer = await ask({"id": 3, "op": "add", "args": ["q3", "x", "{}"]})
    assert answer["ok"][0] == "1" and answer["ok"][2] == "waiting"
    writer.close()


async def test_a_version_2_client_cannot_send_add(served: CountingServer) -> None:
    ask, writer = await raw_client(served.url)
    assert (await ask({"id": 1, "op": "hello", "args": [2, None]}))["ok"]["version"] == 2
    refused = await ask({"id": 2, "op": "add", "args": ["q2", "x", "{}"]})
    assert "unknown command" in str(refused["err"])  # version 3's command, not on version 2
    answer = await ask({"id": 3, "op": "add_batch", "args": [[["q2", [["x", "1", {}, None]]]]]})
    assert answer["ok"][0][0][0] == "1"
    writer.close()


async def test_a_client_speaks_version_2_to_a_version_2_server(
    served: CountingServer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_connection, "SUPPORTED_VERSIONS", (1, 2))
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        job = await queue.add("a", 1)
        assert job.data == 1 and await job.get_state() == "waiting"
        assert "add" not in served.requests
        assert served.requests.count("add_batch") == 1


async def test_a_client_speaks_version_1_to_an_older_server(
    served: CountingServer, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_connection, "SUPPORTED_VERSIONS", (1,))
    async with psyq.Queue(queue_name, connection=served.url) as queue:
        jobs = await asyncio.gather(queue.add("a", 1), queue.add("b", 2))
        assert [job.data for job in jobs] == [1, 2]
        assert "add_batch" not in served.requests
        assert served.requests.count("add_jobs") == 2


async def test_adds_waiting_for_a_lost_connection_raise_connection_error(
    served: CountingServer, queue_name: str
) -> None:
    backend = ServerBackend(served.url + "?pool=1")
    await backend.open()
    try:
        conn = await backend._connection()
        future = asyncio.ensure_future(backend.add_jobs(queue_name, [NewJob("x", "1", {})]))
        await asyncio.sleep(0)  # joined the batch, not yet written
        conn.connection_lost(None)
        with pytest.raises(psyq.ConnectionError):
            await future
    finally:
        await backend.close()


class SuspendingBackend(MemoryBackend):
    """An engine whose adds wait a loop turn first, as a durable SQLite commit does."""

    async def add_jobs(self, queue: str, jobs: Any) -> list[JobRecord]:
        await asyncio.sleep(0)
        if any(job.name == "refuse" for job in jobs):
            raise psyq.InvalidOptionsError("refused after waiting")
        return await super().add_jobs(queue, jobs)


async def test_groups_that_wait_are_answered_each_with_its_own_outcome(queue_name: str) -> None:
    server = Server(SuspendingBackend("memory://suspending"))
    host, port = await server.start("127.0.0.1", 0)
    backend = ServerBackend(f"psyq://{host}:{port}?pool=1")
    await backend.open()
    try:
        results = await asyncio.gather(
            backend.add_jobs(queue_name, [NewJob("a", "1", {})]),
            backend.add_jobs(queue_name, [NewJob("refuse", "2", {})]),
            backend.add_jobs(queue_name, [NewJob("b", "3", {}), NewJob("c", "4", {})]),
            return_exceptions=True,
        )
        first, refused, pair = results
        assert isinstance(first, list) and [r.name for r in first] == ["a"]
        assert isinstance(refused, psyq.InvalidOptionsError)
        assert isinstance(pair, list) and [r.name for r in pair] == ["b", "c"]
        assert not any(conn.tasks for conn in server.connections)  # nothing left running
    finally:
        await backend.close()
        await server.close()


async def test_a_lone_add_that_waits_is_answered_with_its_record_or_error(
    queue_name: str,
) -> None:
    server = Server(SuspendingBackend("memory://suspending-one"))
    host, port = await server.start("127.0.0.1", 0)
    backend = ServerBackend(f"psyq://{host}:{port}?pool=1")
    await backend.open()
    try:
        [record] = await backend.add_jobs(queue_name, [NewJob("a", "1", {})])  # an `add`
        stored = await backend.get_job(queue_name, record.id)
        assert stored is not None and replace(record, state=None) == replace(stored, state=None)
        with pytest.raises(psyq.InvalidOptionsError, match="refused after waiting"):
            await backend.add_jobs(queue_name, [NewJob("refuse", "2", {})])
        assert not any(conn.tasks for conn in server.connections)  # nothing left running
    finally:
        await backend.close()
        await server.close()
