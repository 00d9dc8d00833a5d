"""JSON in and out of storage (BullMQ stores data and return values as JSON). Never pickle."""

from __future__ import annotations

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
_CACHED_OPTIONS = 1024  # texts kept per parser; the cache starts over when it is full
_SCALARS = (str, int, float, bool, type(None))
_CONTAINERS = (dict, list)


def _own_copy(options: dict[str, Any]) -> dict[str, Any]:
    """`options` copied one level down (each dict or list value copied too): nothing mutable
    is shared when _shallow(options)."""
    return {
        key: value.copy() if type(value) in _CONTAINERS else value for key, value in options.items()
    }


def _shallow(options: dict[str, Any]) -> bool:
    """Whether _own_copy shares nothing mutable: no list or dict below the first level."""
    for value in options.values():
        if type(value) in _SCALARS:
            continue
        inner = value.values() if type(value) is dict else value if type(value) is list else None
        if inner is None or any(type(item) not in _SCALARS for item in inner):
            return False
    return True


def options_parser(parse: Callable[[str], dict[str, Any]]) -> OptionsParser:
    """`parse` (a job's stored options text -> dict) made cheap for the texts many jobs of a
    queue share: a text whose values are scalars, or dicts and lists of scalars (a group,
    a backoff), is parsed once and handed out as a fresh copy; a deeper one is parsed every
    time (a copy would share its inner values); each text is parsed at most once per call.
    None and "{}" are {} without parsing."""
    kept: dict[str, dict[str, Any] | None] = {}  # text -> its options, or None: deeper

    def parsed(text: str | None) -> dict[str, Any]:
        if not text or text == "{}":
            return {}
        try:
            template = kept[text]
        except KeyError:  # not seen (or the cache started over)
            options = parse(text)
            if len(text) <= _CACHED_OPTIONS_LEN:
                if len(kept) >= _CACHED_OPTIONS:
                    kept.clear()
                kept[text] = _own_copy(options) if _shallow(options) else None
            return options
        return parse(text) if template is None else _own_copy(template)

    return parsed
