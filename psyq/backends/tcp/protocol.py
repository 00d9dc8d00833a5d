"""The psyq wire protocol, shared by `psyq server` and the `psyq://` client.

Frames: a 4-byte big-endian length, then a MessagePack map of that many bytes.

    request   {"id": int, "op": str, "args": [...]}      op: "hello", "cancel" or an adapter
                                                          method of `COMMANDS`
    answer    {"id": int, "ok": value} | {"id": int, "err": <ext error>}

The first request of a connection is `hello` with args [version, token or None]; the server
answers {"server": "psyq", "version": version} when it speaks that version
(`SUPPORTED_VERSIONS`), else an error, and then closes. Version 2 adds `add_batch`, version 3
`add`, one job without options in its shortest form (tcp/adding.py); a client that finds an
older server tries the next older version, down to 1. Requests are
pipelined: many may be in flight on one connection and answers come in any order, matched by
id. `cancel` (args [id]) stops a blocked request (wait_for_job, read_events) and is not
answered. A blocked request is answered the moment the engine wakes it: nothing polls.

Values are plain MessagePack; the contract's dataclasses and psyq errors travel as ext types
(`EXT_CODES`) whose payload is the packed list of their fields, checked field by field on
decode. Never pickle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import threading
from collections.abc import Callable, Container
from operator import attrgetter, contains
from typing import Any

import msgpack

import psyq.errors
from psyq.backends.base import (
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
from psyq.errors import PsyqError

__all__ = [
    "COMMANDS",
    "DEFAULT_PORT",
    "HEADER",
    "MAX_FRAME_BYTES",
    "MAX_HELLO_FRAME",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "FrameBuffer",
    "Outbox",
    "ProtocolError",
    "decode",
    "encode",
    "frame",
]

PROTOCOL_VERSION = 3  # 2: add_batch, 3: add (tcp/adding.py); a server speaks every version below
SUPPORTED_VERSIONS = (1, 2, 3)
DEFAULT_PORT = 6789
MAX_FRAME_BYTES = 64 * 1024 * 1024
MAX_HELLO_FRAME = 16 * 1024  # the largest frame before a connection's hello is accepted
HEADER = struct.Struct(">I")
OUTBOX_BATCH = 16
OUTBOX_BYTES = 64 * 1024  # an outbox holding this much is written at once
READ_BUFFER = 16 * 1024  # bytes an idle connection holds to receive into; grown for a larger
# frame (doubling) and shrunk back once everything received is read

# The adapter methods a client may call: an explicit allow-list (open/close stay local).
COMMANDS: frozenset[str] = frozenset(
    {
        "now_ms",
        "add_jobs",
        "move_to_active",
        "wait_for_job",
        "move_to_finished",
        "retry_job",
        "settle_many",
        "move_to_delayed",
        "move_job_from_active_to_wait",
        "extend_locks",
        "move_stalled_jobs_to_wait",
        "get_job",
        "get_state",
        "get_jobs",
        "get_job_counts",
        "get_job_logs",
        "is_paused",
        "list_queues",
        "update_progress",
        "add_log",
        "clear_logs",
        "update_data",
        "change_priority",
        "change_delay",
        "promote",
        "reprocess_job",
        "remove_job",
        "pause",
        "resume",
        "drain",
        "clean",
        "obliterate",
        "retry_jobs",
        "promote_jobs",
        "add_flow",
        "get_flow",
        "move_to_waiting_children",
        "get_dependencies",
        "get_children_values",
        "get_failed_children_values",
        "read_events",
        "newest_event_id",
        "set_max_len_events",
        "upsert_job_scheduler",
        "get_job_scheduler",
        "get_job_schedulers",
        "remove_job_scheduler",
        "rate_limit",
        "get_rate_limit_ttl",
        "set_global_rate_limit",
        "set_global_concurrency",
        "get_deduplication_job_id",
        "remove_deduplication_key",
        "get_metrics",
        "get_counts_per_priority",
        "register_worker",
        "unregister_worker",
        "get_workers",
        "cancel_job",
        "get_cancelled",
        "export_jobs",
        "import_jobs",
        "get_queue_meta",
        "set_queue_meta",
    }
)

# Requests that block until the engine wakes them; a client may cancel them.
BLOCKING_COMMANDS = frozenset({"wait_for_job", "read_events"})


class ProtocolError(PsyqError, ValueError):
    """A frame or value that breaks the psyq wire protocol; the message names it."""


# ---------------------------------------------------------------------- field checks
# A field check is a tuple of the exact types allowed (the fast, common case) or a function.
Check = tuple[type, ...] | Callable[[Any], bool]
NONE = type(None)
STR: Check = (str,)
INT: Check = (int,)
DICT: Check = (dict,)
OPT_STR: Check = (str, NONE)
OPT_INT: Check = (int, NONE)
ANY: Check = ()  # no check
KEEP: Check = (bool, int, dict, NONE)  # removeOnComplete / removeOnFail


def _fits(check: Check, value: Any) -> bool:
    if type(check) is tuple:
        return not check or type(value) in check
    return check(value)  # type: ignore[operator]


def _optional(check: Check) -> Check:
    return lambda v: v is None or _fits(check, v)


def _list_of(check: Check) -> Check:
    if type(check) is tuple and check:
        allowed = check
        return lambda v: type(v) is list and (not v or all(type(x) in allowed for x in v))
    return lambda v: type(v) is list and all(_fits(check, item) for item in v)


def _instance(*types: type) -> Check:
    return lambda v: isinstance(v, types)


@dataclasses.dataclass(frozen=True)
class ExtSpec:
    """How one dataclass travels: its ext code, its fields in order and their checks."""

    code: int
    cls: type
    fields: tuple[tuple[str, Check], ...]
    required: int  # fields without a default: a payload may omit the trailing others
    getter: Callable[[Any], Any]  # the field values, as a tuple (one field: the value)
    # The fast form of the checks: per field, the exact types allowed (any type: a set that
    # holds them all); then the fields whose check is a function, by index.
    types: tuple[Container[type], ...] = ()
    deep: tuple[tuple[int, Callable[[Any], bool]], ...] = ()

    def bad_field(self, fields: list[Any]) -> int:
        """The index of the first field that fails its check, or -1."""
        if not all(map(contains, self.types, map(type, fields))):  # the fast, C-level pass
            for index, (value, allowed) in enumerate(zip(fields, self.types, strict=False)):
                if type(value) not in allowed:
                    return index
        for index, check in self.deep:
            if index < len(fields) and not check(fields[index]):
                return index
        return -1

    def pack(self, obj: Any) -> list[Any]:
        values = self.getter(obj)
        return list(values) if len(self.fields) > 1 else [values]


def _spec(code: int, cls: type, *fields: tuple[str, Check]) -> ExtSpec:
    defaults = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    required = sum(1 for name, _ in fields if name not in defaults)
    getter = attrgetter(*(name for name, _ in fields))
    types = tuple(check if type(check) is tuple and check else _EVERY_TYPE for _, check in fields)
    deep = tuple((i, check) for i, (_, check) in enumerate(fields) if callable(check))
    return ExtSpec(code, cls, fields, required, getter, types, deep)


class _EveryType:
    """The allowed types of a field that takes any type (or is checked by a function)."""

    def __contains__(self, item: object) -> bool:
        return True


_EVERY_TYPE = _EveryType()


_str_list = _list_of(STR)

SPECS: tuple[ExtSpec, ...] = (
    _spec(
        1,
        JobRecord,
        ("id", STR),
        ("queue", STR),
        ("name", STR),
        ("data", STR),
        ("opts", DICT),
        ("timestamp", INT),
        ("delay", INT),
        ("priority", INT),
        ("progress", ANY),
        ("attempts_made", INT),
        ("attempts_started", INT),
        ("stalled_counter", INT),
        ("processed_on", OPT_INT),
        ("finished_on", OPT_INT),
        ("returnvalue", OPT_STR),
        ("failed_reason", OPT_STR),
        ("stacktrace", _str_list),
        ("parent_key", OPT_STR),
        ("processed_by", OPT_STR),
        ("lock_token", OPT_STR),
        ("state", OPT_STR),
    ),
    _spec(2, NewJob, ("name", STR), ("data", STR), ("opts", DICT), ("timestamp", OPT_INT)),
    _spec(
        3,
        FlowNode,
        ("queue", STR),
        ("job", _instance(NewJob)),
        ("children", _list_of(_instance(FlowNode))),
    ),
    _spec(
        4,
        FetchRequest,
        ("tokens", _str_list),
        ("lock_duration", INT),
        ("worker_name", OPT_STR),
        ("limiter", _optional(_instance(Limiter))),
    ),
    _spec(5, Limiter, ("max", INT), ("duration", INT)),
    _spec(6, Completed, ("returnvalue", STR), ("keep", KEEP)),
    _spec(7, Failed, ("reason", STR), ("stacktrace", _str_list), ("keep", KEEP)),
    _spec(8, Retry, ("reason", STR), ("stacktrace", _str_list), ("delay", INT)),
    _spec(
        9,
        Settlement,
        ("job_id", STR),
        ("token", STR),
        ("outcome", _instance(Completed, Failed, Retry)),
    ),
    _spec(10, StalledResult, ("stalled", _str_list), ("failed", _str_list)),
    _spec(
        11,
        ExportPage,
        ("jobs", _list_of(_instance(JobRecord))),
        ("logs", lambda v: type(v) is dict and all(_fits(_str_list, r) for r in v.values())),
        ("next_cursor", OPT_STR),
        ("due", lambda v: type(v) is dict and all(type(t) is int for t in v.values())),
        ("deps", lambda v: type(v) is dict and all(type(d) is dict for d in v.values())),
    ),
)
ERROR_CODE = 20
_BY_TYPE: dict[type, ExtSpec] = {spec.cls: spec for spec in SPECS}
_BY_CODE: dict[int, ExtSpec] = {spec.code: spec for spec in SPECS}

# Errors a server may send back: every PsyqError subclass of psyq.errors, by class name.
ERROR_TYPES: dict[str, type[PsyqError]] = {
    name: cls
    for name in psyq.errors.__all__
    if isinstance(cls := getattr(psyq.errors, name), type) and issubclass(cls, PsyqError)
}
ERROR_TYPES["ProtocolError"] = ProtocolError


# ---------------------------------------------------------------------- encode
class _Packers(threading.local):
    """Reusable Packers, per thread: one for messages, and one per nesting level of ext
    payloads (a Packer is not reentrant: an ext payload is packed while its parent is)."""

    def __init__(self) -> None:
        self.message = msgpack.Packer(default=_default, use_bin_type=True)
        self.stack: list[msgpack.Packer] = []
        self.depth = 0


def _default(obj: Any) -> Any:
    spec = _BY_TYPE.get(type(obj))
    if spec is not None:
        return msgpack.ExtType(spec.code, _pack(spec.pack(obj)))
    if isinstance(obj, PsyqError):
        return msgpack.ExtType(ERROR_CODE, _pack(_error_fields(obj)))
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} over psyq://: {obj!r:.80}")


def _pack(value: Any) -> bytes:
    packers = _PACKERS
    depth = packers.depth
    if depth == len(packers.stack):
        packers.stack.append(msgpack.Packer(default=_default, use_bin_type=True))
    packers.depth = depth + 1
    try:
        return packers.stack[depth].pack(value)  # type: ignore[no-any-return]
    finally:
        packers.depth = depth


_PACKERS = _Packers()  # after _default, which its Packers call


def _error_fields(exc: PsyqError) -> list[Any]:
    name = type(exc).__name__ if type(exc).__name__ in ERROR_TYPES else "PsyqError"
    attrs = {k: v for k, v in vars(exc).items() if type(v) in (str, int, bool, type(None))}
    return [name, str(exc), attrs]


def encode(message: dict[str, Any]) -> bytes:
    """Pack one message (never called while a message is being packed: `_default` packs
    ext payloads with `_pack`)."""
    return _PACKERS.message.pack(message)  # type: ignore[no-any-return]


def frame(message: dict[str, Any]) -> bytes:
    """One frame: the length prefix and the packed message."""
    body: bytes = _PACKERS.message.pack(message)
    return HEADER.pack(len(body)) + body


# ---------------------------------------------------------------------- decode
def _ext_hook(code: int, payload: bytes) -> Any:
    if code == ERROR_CODE:
        return _decode_error(_unpack(payload))
    spec = _BY_CODE.get(code)
    if spec is None:
        raise ProtocolError(f"unknown MessagePack ext type {code}")
    fields = _unpack(payload)
    if type(fields) is not list or not spec.required <= len(fields) <= len(spec.fields):
        raise ProtocolError(
            f"a {spec.cls.__name__} is a list of {len(spec.fields)} fields, got {fields!r:.80}"
        )
    bad = spec.bad_field(fields)
    if bad >= 0:
        name = spec.fields[bad][0]
        raise ProtocolError(f"bad {spec.cls.__name__}.{name}: {fields[bad]!r:.80}")
    return spec.cls(*fields)


def _decode_error(fields: Any) -> PsyqError:
    if (
        type(fields) is not list
        or len(fields) != 3
        or type(fields[0]) is not str
        or type(fields[1]) is not str
        or type(fields[2]) is not dict
    ):
        raise ProtocolError(f"an error is [type, message, attributes], got {fields!r:.80}")
    name, message, attrs = fields
    cls = ERROR_TYPES.get(name, PsyqError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for key, value in attrs.items():
        if type(key) is str and type(value) in (str, int, bool, type(None)):
            setattr(exc, key, value)
    return exc


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=True)


def decode(body: bytes) -> dict[str, Any]:
    """Unpack one frame body into a message map, or raise ProtocolError naming the problem."""
    try:
        message = _unpack(body)
    except ProtocolError:
        raise
    except RecursionError:
        raise ProtocolError("the message is nested too deeply") from None
    except (ValueError, TypeError) as exc:
        kind = type(exc).__name__
        raise ProtocolError(f"invalid MessagePack ({kind}: {exc}): {body[:40]!r}") from None
    if type(message) is not dict:
        raise ProtocolError(f"a message is a map, got {type(message).__name__}: {message!r:.80}")
    return message


# ---------------------------------------------------------------------- framing
class FrameBuffer:
    """Collects received bytes and splits them into frame bodies.

    Bytes arrive through `feed` (a plain protocol's data) or straight into one reusable
    buffer: `get_buffer` hands out its free tail and `buffer_updated` reads the frames
    (asyncio.BufferedProtocol). The buffered way saves the large bytes object a plain
    protocol's every read allocates, which costs more than the rest of a small request."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES, size: int = READ_BUFFER) -> None:
        self.max_frame = max_frame
        self._size = size
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = 0  # the first byte not yet read as part of a frame
        self._end = 0  # the end of the bytes received

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the complete frame bodies. ProtocolError on an oversize one."""
        bodies: list[bytes] = []
        while data:
            room = self.get_buffer(len(data))
            count = min(len(room), len(data))
            room[:count] = data[:count]
            data = data[count:]
            bodies += self.buffer_updated(count)
        return bodies

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """The free space to receive into (at least one byte)."""
        if self._end == len(self._buf):
            self._make_room()
        return self._view[self._end :]

    def _make_room(self) -> None:
        start, end = self._start, self._end
        kept = end - start
        if start == 0:  # one frame fills the buffer: a larger one (its size was checked)
            larger = bytearray(2 * len(self._buf))
            larger[:kept] = self._view[:kept]
            self._buf, self._view = larger, memoryview(larger)
        else:  # move the partial frame to the front
            self._buf[:kept] = self._view[start:end]
        self._start, self._end = 0, kept

    def buffer_updated(self, nbytes: int) -> list[bytes]:
        """`nbytes` were received into the last `get_buffer`: the complete frame bodies."""
        self._end = end = self._end + nbytes
        buf, pos = self._buf, self._start
        bodies: list[bytes] = []
        while end - pos >= 4:
            (size,) = HEADER.unpack_from(buf, pos)
            if size > self.max_frame:
                raise ProtocolError(
                    f"frame of {size} bytes exceeds the limit of {self.max_frame} bytes"
                )
            if end - pos - 4 < size:
                break
            bodies.append(bytes(self._view[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos == end:  # all read: start again at the front (a grown buffer shrinks back)
            self._start = self._end = 0
            if len(buf) > self._size:
                self._buf = bytearray(self._size)
                self._view = memoryview(self._buf)
        else:
            self._start = pos
        return bodies

    def release(self) -> None:
        """Drop the buffer (the connection closed): its memory goes now, whatever still
        refers to this object."""
        self._buf = bytearray()
        self._view = memoryview(self._buf)
        self._start = self._end = 0

    @property
    def partial(self) -> bool:
        """True while part of a frame is buffered."""
        return self._end > self._start


class Outbox:
    """Frames waiting to be written: sent together at the end of the event-loop turn, or as
    soon as `batch` frames (or OUTBOX_BYTES) are waiting, so the peer starts on the first
    answers while later ones are still being computed (both ends work at once instead of
    taking turns), and a connection's answers pass the transport's limit one batch at most
    before it pauses the connection."""

    def __init__(self, write: Callable[[bytes], None], batch: int = OUTBOX_BATCH) -> None:
        self._write = write
        self._batch = batch
        self._frames: list[bytes] = []
        self._bytes = 0  # the size of `_frames`
        self._deferred: list[Callable[[], bytes | None]] = []  # frames made at write time
        self._scheduled = False
        self._held = False
        self._loop = asyncio.get_running_loop()

    def add(self, data: bytes) -> None:
        frames = self._frames
        frames.append(data)
        self._bytes += len(data)
        if len(frames) >= self._batch or self._bytes >= OUTBOX_BYTES:
            self.flush()
        elif not self._scheduled and not self._held:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def defer(self, make: Callable[[], bytes | None]) -> None:
        """Call `make` when the frames are written (at the end of this turn) and send the
        frame it returns: requests that gather callers until then (see tcp/adding.py)."""
        self._deferred.append(make)
        if not self._scheduled and not self._held:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def flush_after_wakeups(self) -> None:
        """Schedule the write now, behind the callbacks just scheduled (the tasks woken by
        answers): the requests those tasks make in their next step leave in that same
        event-loop turn, instead of one turn later."""
        if not self._scheduled and not self._held:
            self._scheduled = True
            self._loop.call_soon(self._flush_soon)

    def hold(self) -> None:
        """Keep what is added until `release`, which writes it (no callback scheduled)."""
        self._held = True

    def release(self) -> None:
        self._held = False
        self.flush()

    def _flush_soon(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        if self._deferred:
            makers, self._deferred = self._deferred, []
            for make in makers:
                data = make()
                if data:
                    self._frames.append(data)
        if self._frames:
            data = b"".join(self._frames)
            self._frames = []
            self._bytes = 0
            self._write(data)

    def close(self) -> None:
        """Drop what waits and write nothing more (the connection closed); this also
        breaks the outbox's reference to its connection (through `write`)."""
        self._frames, self._deferred, self._bytes = [], [], 0
        self._write = _write_nothing


def _write_nothing(data: bytes) -> None:
    pass
