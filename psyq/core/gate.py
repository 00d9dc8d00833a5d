"""The gate every job passes once, before any backend sees it.

What a backend stores — a job's name, data and options, a return value, progress, a log
line, a scheduler's template — is checked here the same way for every backend, so a value
one store could not hold is refused before anything is written, with the same error on
every backend:
- text is valid Unicode (no lone surrogates), in keys as in values (`codec.bad_unicode`);
- data, return values and progress are JSON (`codec.dumps`, in the pass that encodes them);
- options are known and in range, integers at most 2**53 - 1 (`options`).

Text problems in names, data and logs raise `InvalidDataError`; problems in options raise
`InvalidOptionsError`; both name the field, the job and the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psyq.backends.base import NewJob
from psyq.core.options import group_option, merge_job_options, normalize_job_options
from psyq.errors import InvalidDataError, InvalidOptionsError
from psyq.rules import codec

__all__ = ["job_name", "new_job", "text"]


def text(what: str, value: str, job: object) -> str:
    """`value` if every store can hold it, else InvalidDataError naming `what` of `job`."""
    problem = codec.bad_text(value)
    if problem is not None:
        raise InvalidDataError(
            f"{what} of job {job!r} cannot be stored: {problem} ({codec.UNICODE_HINT})"
        )
    return value


def job_name(name: Any) -> str:
    if type(name) is str and name.isascii() and "\x00" not in name:
        return name  # the common case, at the cost of two C calls
    if not isinstance(name, str):
        raise InvalidOptionsError(f"job name must be a string, got {name!r}")
    problem = codec.bad_text(name)
    if problem is not None:
        raise InvalidDataError(f"job name {name!r} cannot be stored: {problem}")
    return name


def new_job(
    name: Any,
    data: Any,
    opts: Mapping[str, Any] | None,
    kwargs: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> NewJob:
    """The checked job: its name, options (over `defaults`) and data encoded as JSON. A job
    without options, the common case, costs the C-level checks of its name and its data; a
    job whose only option is its group, the check of that option alone (`group_option`,
    the very check normalize_job_options makes of it: nothing else applies to such a job)."""
    if type(name) is not str or not name.isascii() or "\x00" in name:
        name = job_name(name)  # the same test first, then what is wrong
    if kwargs and (opts is None or (type(opts) is dict and not opts)):
        opts, kwargs = kwargs, None  # keywords alone read as the mapping of them does
    try:
        if kwargs:
            given = normalize_job_options(opts, **kwargs)
        elif opts is None or (type(opts) is dict and not opts):
            given = {}
        elif type(opts) is dict and len(opts) == 1 and "group" in opts:
            given = _only_group(opts["group"])
            if not defaults:  # no sizeLimit, no timestamp; dumps raises InvalidDataError,
                return NewJob(name, codec.dumps(data, "data", name), given)  # not caught
        else:
            given = normalize_job_options(opts)
    except InvalidOptionsError as exc:
        raise InvalidOptionsError(f"job {name!r}: {exc}", option=exc.option) from None
    merged = merge_job_options(defaults, given) if defaults else given
    if merged:
        encoded = codec.dumps(data, "data", name, merged.get("sizeLimit"))
        return NewJob(name, encoded, merged, merged.get("timestamp"))
    return NewJob(name, codec.dumps(data, "data", name), merged)


# The options of a job whose only option is a group given by its id alone, by that id (a
# string, or an integer, each in its own map: 1 == True): one dict for every such job of
# the group, as a store shares it among their records (no backend changes a job's options
# in place, and Job copies them), so such an add makes no dicts of its own. Only ids
# `group_option` accepted are kept; emptied when full.
_BY_TEXT: dict[str, dict[str, Any]] = {}
_BY_INT: dict[int, dict[str, Any]] = {}
ONLY_GROUP_KEPT = 1024  # ids of each kind


def _only_group(value: Any) -> dict[str, Any]:
    """The checked options {"group": value} (group_option's check, done once per id)."""
    if type(value) is dict and len(value) == 1 and "id" in value:
        gid: Any = value["id"]
        kind = type(gid)
        if kind is str or kind is int:
            known: dict[Any, dict[str, Any]] = _BY_TEXT if kind is str else _BY_INT
            if gid in known:  # `in`, then the item: no call
                return known[gid]
            opts = {"group": group_option("group", value)}
            if len(known) >= ONLY_GROUP_KEPT:
                known.clear()
            known[gid] = opts
            return opts
    return {"group": group_option("group", value)}
