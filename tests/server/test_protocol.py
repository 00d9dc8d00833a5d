"""The wire codec and the server's dispatcher, in process: round trips of every dataclass,
clear errors for bad values, and a hypothesis fuzz of frames and requests (the store is a
real memory:// engine; only the socket is replaced by a transport that records writes)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psyq.backends.base import (
    IN_TRANSACTION,
    BackendAdapter,
    Completed,
    ExportPage,
    Failed,
    FetchRequest,
    FlowNode,
    JobRecord,
    Limiter,
    NewJob,
    Retry,
    Settlement,
    StalledResult,
)
from psyq.backends.engine import MemoryBackend
from psyq.backends.server.codec import decode, encode, frame
from psyq.backends.server.commands import check_args, signatures
from psyq.backends.server.framing import FrameBuffer
from psyq.backends.server.protocol import COMMANDS, HEADER, PROTOCOL_VERSION, ProtocolError
from psyq.backends.server.server import Server
from psyq.backends.server.server_connection import ServerConnection, ServerLimits
from psyq.errors import InvalidOptionsError, JobNotFoundError, LockError

RECORD = JobRecord(
    "1", "q", "send", '{"a":1}', {"attempts": 3}, 1700, stacktrace=["x"], lock_token="t"
)
VALUES = [
    RECORD,
    NewJob("n", "{}", {"delay": 5}),
    NewJob("n", "{}", {}, 17),
    FlowNode("q", NewJob("p", "{}", {}), [FlowNode("c", NewJob("k", "1", {}))]),
    FetchRequest(["a", "b"], 30000, "w1", Limiter(10, 1000)),
    Completed('"ok"'),
    Failed("boom", ["line"]),
    Retry("again", [], 250),
    Settlement("1", "tok", Completed("null")),
    StalledResult(["1"], ["2"]),
    ExportPage([RECORD], {"1": ["log"]}, "cursor"),
]


def test_allow_list_is_the_contract() -> None:
    public = {
        name
        for name in dir(BackendAdapter)
        if not name.startswith("_") and asyncio.iscoroutinefunction(getattr(BackendAdapter, name))
    }
    assert public - {"open", "close"} - IN_TRANSACTION == set(COMMANDS)


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_dataclasses_round_trip(value: Any) -> None:
    back = decode(encode({"id": 1, "ok": value}))["ok"]
    assert type(back) is type(value)
    assert back == value or _fields(back) == _fields(value)


def _fields(obj: Any) -> list[Any]:
    return [
        list(v) if isinstance(v, tuple) else v for v in (getattr(obj, s) for s in obj.__slots__)
    ]


@pytest.mark.parametrize(
    "error",
    [
        JobNotFoundError("q", "42"),
        LockError("7", "complete", "the lock is held by another token"),
        InvalidOptionsError("bad option 'attempts': -1", option="attempts"),
    ],
)
def test_errors_round_trip_with_type_and_message(error: Exception) -> None:
    back = decode(encode({"id": 1, "err": error}))["err"]
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (msgpack.ExtType(1, msgpack.packb(["1", "q"])), "JobRecord is a list of 21 fields"),
        (msgpack.ExtType(5, msgpack.packb([10, "x"])), "bad Limiter.duration: 'x'"),
        (msgpack.ExtType(6, msgpack.packb([7])), "bad Completed.returnvalue: 7"),
        (msgpack.ExtType(99, b"\x90"), "unknown MessagePack ext type 99"),
        (msgpack.ExtType(20, msgpack.packb(["X", 1, {}])), "an error is [type, message"),
    ],
)
def test_bad_ext_values_are_named(payload: Any, named: str) -> None:
    body = msgpack.packb({"id": 1, "ok": payload})
    with pytest.raises(ProtocolError) as caught:
        decode(body)
    assert named in str(caught.value)


def test_decode_names_bad_bodies() -> None:
    with pytest.raises(ProtocolError, match="a message is a map, got list"):
        decode(msgpack.packb([1, 2]))
    with pytest.raises(ProtocolError, match="invalid MessagePack"):
        decode(b"\xc1")
    with pytest.raises(ProtocolError, match="invalid MessagePack"):
        decode(b"\x91" * 100_000 + b"\xc0")


def test_frame_buffer_splits_and_refuses_oversize() -> None:
    frames = FrameBuffer(max_frame=100)
    data = frame({"id": 1}) + frame({"id": 2})
    assert frames.feed(data[:3]) == []
    assert [decode(b)["id"] for b in frames.feed(data[3:])] == [1, 2]
    assert not frames.partial
    with pytest.raises(ProtocolError, match="frame of 4294967295 bytes exceeds the limit of 100"):
        frames.feed(HEADER.pack(0xFFFFFFFF))


def _receive(frames: FrameBuffer, data: bytes, chunk: int) -> list[bytes]:
    """Deliver `data` as a buffered protocol's reads of at most `chunk` bytes would."""
    bodies: list[bytes] = []
    while data:
        room = frames.get_buffer(-1)
        count = min(len(room), len(data), chunk)
        room[:count] = data[:count]
        data = data[count:]
        bodies += frames.buffer_updated(count)
    return bodies


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_frame_buffer_receives_into_its_own_memory(chunk: int) -> None:
    frames = FrameBuffer(size=32)  # smaller than the large frame: the buffer grows for it
    messages: list[dict[str, Any]] = [
        {"id": 1, "ok": "x" * 10},
        {"id": 2, "ok": "y" * 500},
        {"id": 3, "ok": None},
    ]
    data = b"".join(frame(m) for m in messages) * 3
    bodies = _receive(frames, data, chunk)
    assert [decode(b) for b in bodies] == messages * 3
    assert all(type(b) is bytes for b in bodies)
    assert not frames.partial
    assert len(frames.get_buffer(-1)) == 32  # back to its first size once drained
    partial = frame(messages[1])
    assert _receive(frames, partial[:-1], chunk) == []
    assert frames.partial
    assert [decode(b) for b in _receive(frames, partial[-1:], chunk)] == [messages[1]]


def test_frame_buffer_refuses_oversize_when_receiving_into_it() -> None:
    frames = FrameBuffer(max_frame=100, size=16)
    with pytest.raises(ProtocolError, match="frame of 4294967295 bytes exceeds the limit of 100"):
        _receive(frames, HEADER.pack(0xFFFFFFFF), 16)


def test_argument_checks_name_the_argument() -> None:
    sigs = signatures()
    with pytest.raises(ProtocolError, match="get_job: argument 'queue' must be str, got 1"):
        check_args(sigs["get_job"], [1, "x"])
    with pytest.raises(ProtocolError, match="get_job takes 2 to 2 arguments"):
        check_args(sigs["get_job"], ["q"])
    with pytest.raises(ProtocolError, match="argument 'request' must be FetchRequest"):
        check_args(sigs["move_to_active"], ["q", {"tokens": []}])
    check_args(sigs["move_to_finished"], ["q", "1", "t", Completed("1"), None])


# ---------------------------------------------------------------------- the dispatcher
class RecordingTransport(asyncio.Transport):
    """A transport that keeps what the server writes (the store behind it is real)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("fuzz", 0) if name == "peername" else default


def _connect(server: Server) -> tuple[ServerConnection, RecordingTransport]:
    conn = ServerConnection(server)
    transport = RecordingTransport()
    conn.connection_made(transport)
    return conn, transport


def _answers(transport: RecordingTransport) -> list[dict[str, Any]]:
    frames = FrameBuffer()
    return [decode(body) for body in frames.feed(bytes(transport.written))]


HELLO = frame({"id": 1, "op": "hello", "args": [PROTOCOL_VERSION, None]})

plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
requests = st.fixed_dictionaries(
    {
        "id": st.integers(0, 2**32),
        "op": st.sampled_from(
            [*sorted(COMMANDS), "add_batch", "hello", "cancel", "__init__", "close", ""]
        ),
        "args": st.lists(plain, max_size=6) | plain,
    }
)


async def _feed_and_settle(conn: ServerConnection, data: bytes) -> None:
    """Feed bytes, let the requests run, then cancel those still blocked (wait_for_job...)."""
    conn.data_received(data)
    for _ in range(5):
        await asyncio.sleep(0)
    for task in list(conn.tasks.values()):
        task.cancel()
    for _ in range(3):
        await asyncio.sleep(0)


jobs: st.SearchStrategy[list[Any]] = st.lists(
    st.lists(plain, max_size=5)
    | st.tuples(st.text(max_size=5), st.text(max_size=5), st.just({}), st.none()).map(list),
    max_size=3,
)
add_batches = st.fixed_dictionaries(
    {
        "id": st.integers(2, 2**32),
        "op": st.just("add_batch"),
        "args": st.lists(st.lists(st.lists(st.text(max_size=8) | plain, max_size=3)), max_size=2)
        | st.tuples(st.lists(st.tuples(st.text(max_size=8), jobs).map(list), max_size=3)).map(list),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(add_batches, min_size=1, max_size=4, unique_by=lambda m: m["id"]))
def test_fuzz_add_batches_get_answers_or_errors(batch: list[dict[str, Any]]) -> None:
    async def scenario() -> None:
        server = Server(MemoryBackend("memory://fuzz"))
        conn, transport = _connect(server)
        await _feed_and_settle(conn, HELLO + b"".join(frame(m) for m in batch))
        answers = {m["id"]: m for m in _answers(transport)}
        for message in batch:  # every request is answered: ok (one result per group) or err
            answer = answers[message["id"]]
            if "ok" in answer:
                assert len(answer["ok"]) == len(message["args"][0])
            else:
                assert isinstance(answer["err"], Exception)

    asyncio.run(scenario())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks=st.lists(st.binary(max_size=64), max_size=6))
def test_fuzz_random_bytes_never_break_the_server(chunks: list[bytes]) -> None:
    async def scenario() -> None:
        server = Server(MemoryBackend("memory://fuzz"), limits=ServerLimits(max_frame=4096))
        conn, transport = _connect(server)
        for chunk in chunks:
            if transport.closed:
                break
            await _feed_and_settle(conn, HELLO + chunk)
        for message in _answers(transport):  # whatever it wrote is well-formed
            assert "ok" in message or "err" in message

    asyncio.run(scenario())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(requests, min_size=1, max_size=5))
def test_fuzz_requests_get_answers_or_a_close(batch: list[dict[str, Any]]) -> None:
    async def scenario() -> None:
        backend = MemoryBackend("memory://fuzz")
        server = Server(backend)
        conn, transport = _connect(server)
        await _feed_and_settle(conn, HELLO + b"".join(frame(m) for m in batch))
        for message in _answers(transport):
            assert "ok" in message or isinstance(message["err"], Exception)
        other, other_transport = _connect(server)  # a fresh client still gets served
        await _feed_and_settle(other, HELLO + frame({"id": 2, "op": "list_queues", "args": []}))
        answers = {m["id"]: m for m in _answers(other_transport)}
        assert "ok" in answers[2]

    asyncio.run(scenario())
