"""How the contract's records travel over psyq://: each dataclass as a MessagePack ext type
(`SPECS`: its code, its fields in order), and the check each field passes on decode (a
tuple of the exact types allowed, or a function) before the record is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container
from operator import attrgetter, contains
from typing import Any

from psyq.backends.base import (
    Completed,
    ExportPage,
    Failed,
    FetchRequest,
    FlowNode,
    GroupLimits,
    JobRecord,
    Limiter,
    NewJob,
    Retry,
    Settlement,
    StalledResult,
)

__all__ = ["SPECS", "Check", "ExtSpec"]

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
        ("held", _str_list),
        ("group", _optional(_instance(GroupLimits))),
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
    _spec(12, GroupLimits, ("concurrency", OPT_INT), ("limiter", _optional(_instance(Limiter)))),
)
