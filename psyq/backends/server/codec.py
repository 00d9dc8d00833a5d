"""Packing and unpacking psyq:// messages: MessagePack maps whose records and psyq errors
travel as ext types (`fields.SPECS`; errors as `ERROR_CODE`), checked field by field when
unpacked; `frame` puts the length header before a packed message. Never pickle.
"""

from __future__ import annotations

import threading
from typing import Any

import msgpack

import psyq.errors
from psyq.backends.server.fields import SPECS, ExtSpec
from psyq.backends.server.protocol import HEADER, ProtocolError
from psyq.errors import PsyqError

__all__ = ["ERROR_TYPES", "decode", "encode", "frame"]

ERROR_CODE = 20
_BY_CODE: dict[int, ExtSpec] = {spec.code: spec for spec in SPECS}

# Errors a server may send back: every PsyqError subclass of psyq.errors, by class name.
ERROR_TYPES: dict[str, type[PsyqError]] = {
    name: cls
    for name in psyq.errors.__all__
    if isinstance(cls := getattr(psyq.errors, name), type) and issubclass(cls, PsyqError)
}
ERROR_TYPES["ProtocolError"] = ProtocolError


class _Packers(threading.local):
    """Reusable Packers, per thread: one for messages, and one per nesting level of ext
    payloads (a Packer is not reentrant: an ext payload is packed while its parent is)."""

    def __init__(self) -> None:
        self.message = msgpack.Packer(default=_default, use_bin_type=True)
        self.stack: list[msgpack.Packer] = []
        self.depth = 0


# Per record type: its ext code and the getter of its field values (a tuple, packed as the
# array `ExtSpec.pack` makes: the same bytes, without building a list).
_PACKING: dict[type, tuple[int, Any]] = {
    spec.cls: (spec.code, spec.getter if len(spec.fields) > 1 else spec.pack) for spec in SPECS
}
_new_ext = tuple.__new__  # an ExtType without its __new__'s checks: code and payload are sound


def _default(obj: Any) -> Any:
    packing = _PACKING.get(type(obj))
    if packing is not None:  # `_pack`'s work inline: this runs for every record sent
        code, values = packing
        packers = _PACKERS
        depth = packers.depth
        if depth == len(packers.stack):
            packers.stack.append(msgpack.Packer(default=_default, use_bin_type=True))
        packers.depth = depth + 1
        try:
            payload = packers.stack[depth].pack(values(obj))
        finally:
            packers.depth = depth
        return _new_ext(msgpack.ExtType, (code, payload))
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
    try:  # `_unpack` inline: one call fewer per message
        message = msgpack.unpackb(body, ext_hook=_ext_hook, raw=False, strict_map_key=True)
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
