"""JSON in and out of storage (BullMQ stores data and return values as JSON). Never pickle."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from psyq.errors import InvalidDataError

__all__ = ["bad_text", "bad_unicode", "dumps", "loads", "printable"]

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


def bad_unicode(text: str) -> str | None:
    """None when `text` is valid Unicode (it has a UTF-8 form, as every store needs), else
    what is wrong with it. Python text can hold lone surrogates (`errors="surrogateescape"`,
    file names from `os.listdir`), which no store and no other language can."""
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return f"it holds a lone surrogate {text[exc.start]!r}, which is not valid Unicode"
    return None


def bad_text(text: str) -> str | None:
    """`bad_unicode`, and a NUL character too: for text a store keeps as it is (names, ids,
    log rows; Postgres text cannot hold NUL), where JSON would have escaped it."""
    if "\x00" in text:
        return "it holds a NUL character ('\\x00'), which Postgres cannot store"
    return bad_unicode(text)


UNICODE_HINT = "decode bytes with errors='replace', or send them as base64"


def dumps(value: Any, what: str, job: object, size_limit: int | None = None) -> str:
    """Encode `value` as compact JSON that every store can hold (valid Unicode, keys and
    values alike), or raise InvalidDataError naming `what` of `job` (the message is only
    built on failure: this runs once per job)."""
    try:
        text = "".join(_fast(value, 0)) if _fast is not None else _encoder.encode(value)
    except RecursionError:
        raise InvalidDataError(
            f"{what} of job {job!r} is not JSON-serialisable: it is circular or nested too deeply"
        ) from None
    except (TypeError, ValueError) as exc:
        raise InvalidDataError(f"{what} of job {job!r} is not JSON-serialisable: {exc}") from None
    if not text.isascii():
        problem = bad_unicode(text)
        if problem is not None:
            raise InvalidDataError(
                f"{what} of job {job!r} cannot be stored: {problem} ({UNICODE_HINT})"
            )
    if "\\u0000" in text and _holds_nul(value):  # the escape, then the value to be sure
        raise InvalidDataError(
            f"{what} of job {job!r} cannot be stored: a string in it holds a NUL character "
            "('\\x00'), which Postgres's jsonb cannot store"
        )
    if size_limit is not None and len(text.encode()) > size_limit:
        raise InvalidDataError(
            f"{what} of job {job!r} is {len(text.encode())} bytes of JSON, over its sizeLimit "
            f"of {size_limit}"
        )
    return text


def _holds_nul(value: Any) -> bool:
    """A string (or a key) anywhere in `value` holds NUL."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(item) for item in value)
    return False


def printable(text: str) -> str:
    """`text` with any lone surrogate written as its escape (`\\udc80`): for text psyq makes
    itself from a value it does not control (an exception's message, a stack trace), which
    must be stored rather than refused."""
    if bad_unicode(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode()


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


OptionsParser = Callable[[str | None], dict[str, Any]]
_CACHED_OPTIONS_LEN = 256  # longer option texts are parsed every time
_SCALARS = (str, int, float, bool, type(None))


def options_parser(parse: Callable[[str], dict[str, Any]]) -> OptionsParser:
    """`parse` (a job's stored options text -> dict) made cheap for the texts many jobs of a
    queue share: a text whose values are all scalars is parsed once and handed out as a
    fresh copy (a copy could not share a nested list or dict, so those are parsed every
    time); None and "{}" are {} without parsing."""

    @functools.lru_cache(maxsize=1024)
    def flat(text: str) -> dict[str, Any] | None:
        options = parse(text)
        return options if all(type(value) in _SCALARS for value in options.values()) else None

    def parsed(text: str | None) -> dict[str, Any]:
        if not text or text == "{}":
            return {}
        cached = flat(text) if len(text) <= _CACHED_OPTIONS_LEN else None
        return dict(cached) if cached is not None else parse(text)

    return parsed
