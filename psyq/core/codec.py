"""JSON in and out of storage (BullMQ stores data and return values as JSON). Never pickle."""

from __future__ import annotations

import json
from typing import Any

from psyq.errors import InvalidDataError

__all__ = ["dumps", "loads"]

_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def _c_encoder() -> Any:
    """CPython's C encoder with `_encoder`'s settings, built once (json builds one per call,
    which costs more than encoding a small job). Without circular-reference markers: a
    cycle surfaces as RecursionError, reported like any other bad value."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    basestring = json.encoder.encode_basestring
    return make(None, _encoder.default, basestring, None, ":", ",", False, False, False)


_fast = _c_encoder()


def _encode(value: Any) -> str:
    return "".join(_fast(value, 0)) if _fast is not None else _encoder.encode(value)


def dumps(value: Any, what: str, job: object, size_limit: int | None = None) -> str:
    """Encode `value` as compact JSON, or raise InvalidDataError naming `what` of `job`
    (the message is only built on failure: this runs once per job)."""
    try:
        text = _encode(value)
    except RecursionError:
        raise InvalidDataError(
            f"{what} of job {job!r} is not JSON-serialisable: it is circular or nested too deeply"
        ) from None
    except (TypeError, ValueError) as exc:
        raise InvalidDataError(f"{what} of job {job!r} is not JSON-serialisable: {exc}") from None
    if size_limit is not None and len(text.encode()) > size_limit:
        raise InvalidDataError(
            f"{what} of job {job!r} is {len(text.encode())} bytes of JSON, over its sizeLimit "
            f"of {size_limit}"
        )
    return text


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
