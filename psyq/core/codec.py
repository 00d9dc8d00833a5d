"""JSON in and out of storage (BullMQ stores data and return values as JSON). Never pickle."""

from __future__ import annotations

import json
from typing import Any

from psyq.errors import InvalidDataError

__all__ = ["dumps", "loads"]

_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def dumps(value: Any, what: str, job: object, size_limit: int | None = None) -> str:
    """Encode `value` as compact JSON, or raise InvalidDataError naming `what` of `job`
    (the message is only built on failure: this runs once per job)."""
    try:
        text = _encoder.encode(value)
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
