"""Job options: the one place where names are mapped and values are checked.

BullMQ's camelCase names and Python's snake_case names are both accepted. The canonical form
is BullMQ's camelCase dict, which is what backends store (it is JSON, and Node BullMQ reads it).
An unknown name or a bad value raises `InvalidOptionsError` naming it; nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from psyq.backends.base import GroupLimits, Limiter
from psyq.errors import InvalidOptionsError
from psyq.rules.codec import UNICODE_HINT, bad_text
from psyq.rules.limits import (
    MAX_COUNT,
    MAX_DELAY_MS,
    MAX_INT,
    MAX_PRIORITY,
    MAX_TIMESTAMP_MS,
    check_int,
)

__all__ = [
    "check_group_limits",
    "check_keep",
    "check_limiter",
    "group_id",
    "merge_job_options",
    "normalize_job_options",
]


def check_text(name: str, value: Any) -> str:
    """Return `value` if it is a string every store can hold, else raise naming `name`."""
    if type(value) is str and value.isascii() and "\x00" not in value:
        return value  # the common case: `bad_text` would find nothing
    if not isinstance(value, str):
        raise InvalidOptionsError(f"option {name!r} must be a string, got {value!r}", option=name)
    problem = bad_text(value)
    if problem is not None:
        raise InvalidOptionsError(
            f"option {name!r} ({value!r}) cannot be stored: {problem} ({UNICODE_HINT})",
            option=name,
        )
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidOptionsError(
            f"option {name!r} must be true or false, got {value!r}", option=name
        )
    return value


def _check_mapping(name: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise InvalidOptionsError(f"option {name!r} must be a mapping, got {value!r}", option=name)
    if not allowed.issuperset(value):
        unknown = sorted(set(value) - allowed)
        raise InvalidOptionsError(
            f"option {name!r} has unknown field(s) {unknown}; allowed: {sorted(allowed)}",
            option=name,
        )
    return dict(value)


_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)")


def _reads_as_integer(text: str) -> bool:
    """BullMQ's rule for custom ids: one that JS's `parseInt` gives back unchanged is an
    integer (taken for an auto id); "01", "-0", "1.5" or a number JS cannot hold exactly
    are not."""
    if text == "-0" or not _DECIMAL.fullmatch(text):
        return False
    number = int(text)
    return abs(number) < 10**21 and int(float(number)) == number


def _job_id(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidOptionsError(f"option {name!r} must be a string, got {value!r}", option=name)
    text = check_text(name, str(value))
    if not text:
        raise InvalidOptionsError(f"option {name!r} must not be empty", option=name)
    if _reads_as_integer(text):
        raise InvalidOptionsError(
            f"option {name!r} must not be an integer ({value!r}); integers are auto ids",
            option=name,
        )
    if ":" in text:
        raise InvalidOptionsError(
            f"option {name!r} must not contain ':', got {value!r}", option=name
        )
    return text


def _backoff(name: str, value: Any) -> int | dict[str, Any]:
    if isinstance(value, int) and not isinstance(value, bool):
        return check_int(name, value)
    spec = _check_mapping(name, value, {"type", "delay", "jitter"})
    kind = spec.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidOptionsError(
            f"option {name!r} needs a 'type' (fixed, exponential or a custom name), got {kind!r}",
            option=name,
        )
    check_text(f"{name}.type", kind)
    if "delay" in spec:
        check_int(f"{name}.delay", spec["delay"])
    if "jitter" in spec:
        jitter = spec["jitter"]
        if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
            raise InvalidOptionsError(
                f"option '{name}.jitter' must be a number between 0 and 1, got {jitter!r}",
                option=name,
            )
    return spec


def _keep(name: str, value: Any) -> bool | int | dict[str, Any]:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return check_int(name, value, maximum=MAX_COUNT)
    spec = _check_mapping(name, value, {"age", "count", "limit"})
    if "age" in spec:
        check_int(f"{name}.age", spec["age"])
    for key in ("count", "limit"):
        if key in spec:
            check_int(f"{name}.{key}", spec[key], maximum=MAX_COUNT)
    return spec


def _parent(name: str, value: Any) -> dict[str, Any]:
    spec = _check_mapping(name, value, {"id", "queue"})
    for key in ("id", "queue"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise InvalidOptionsError(
                f"option '{name}.{key}' must be a non-empty string, got {spec.get(key)!r}",
                option=name,
            )
        check_text(f"{name}.{key}", spec[key])
    return spec


def _deduplication(name: str, value: Any) -> dict[str, Any]:
    spec = _check_mapping(name, value, {"id", "ttl", "extend", "replace"})
    if not isinstance(spec.get("id"), str) or not spec["id"]:
        raise InvalidOptionsError(
            f"option '{name}.id' must be a non-empty string, got {spec.get('id')!r}", option=name
        )
    check_text(f"{name}.id", spec["id"])
    if "ttl" in spec:
        check_int(f"{name}.ttl", spec["ttl"], minimum=1)
    for key in ("extend", "replace"):
        if key in spec:
            _check_bool(f"{name}.{key}", spec[key])
    return spec


def _telemetry(name: str, value: Any) -> dict[str, Any]:
    """BullMQ's `telemetry`: `metadata`, the producer's trace context as text, and
    `omitContext`, true when the worker should not continue that trace."""
    spec = _check_mapping(name, value, {"metadata", "omitContext"})
    if "metadata" in spec:
        check_text(f"{name}.metadata", spec["metadata"])
    if "omitContext" in spec:
        _check_bool(f"{name}.omitContext", spec["omitContext"])
    return spec


MAX_GROUP_ID = 256  # characters (BullMQ Pro's and bunqueue's bound)


def group_id(name: str, value: Any) -> str:
    """A group id: a non-empty string or an integer (normalised to its decimal text)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > MAX_INT:
            raise InvalidOptionsError(
                f"option {name!r} ({value!r}) is past the integers JavaScript holds exactly; "
                "give it as a string",
                option=name,
            )
        return str(value)
    if not isinstance(value, str) or not value:
        raise InvalidOptionsError(
            f"option {name!r} must be a non-empty string or an integer, got {value!r}",
            option=name,
        )
    if len(value) > MAX_GROUP_ID:
        raise InvalidOptionsError(
            f"option {name!r} must be at most {MAX_GROUP_ID} characters, got {len(value)}",
            option=name,
        )
    return check_text(name, value)


def _group(name: str, value: Any) -> dict[str, Any]:
    """BullMQ Pro's `group`: {id, priority (0 first, then lower numbers), maxSize}."""
    if type(value) is dict and len(value) == 1:  # the common {"id": ...}: checked at once
        gid = value.get("id")
        if (
            type(gid) is str
            and 0 < len(gid) <= MAX_GROUP_ID
            and gid.isascii()
            and "\x00" not in gid
        ):
            return {"id": gid}
        if type(gid) is int and -MAX_INT <= gid <= MAX_INT:  # a tenant's number
            return {"id": str(gid)}
    spec = _check_mapping(name, value, {"id", "priority", "maxSize", "max_size"})
    if "id" not in spec:
        raise InvalidOptionsError(f"option {name!r} needs an 'id', got {value!r}", option=name)
    spec["id"] = group_id(f"{name}.id", spec["id"])
    if "priority" in spec:
        check_int(f"{name}.priority", spec["priority"], maximum=MAX_PRIORITY)
    if "max_size" in spec:
        if "maxSize" in spec:
            raise InvalidOptionsError(
                f"option {name!r} names maxSize twice (maxSize and max_size)", option=name
            )
        spec["maxSize"] = spec.pop("max_size")
    if "maxSize" in spec:
        check_int(f"{name}.maxSize", spec["maxSize"], minimum=1, maximum=MAX_COUNT)
    return spec


def _int(minimum: int = 0, maximum: int = MAX_INT) -> Callable[[str, Any], int]:
    return lambda name, value: check_int(name, value, minimum=minimum, maximum=maximum)


_Validator = Callable[[str, Any], Any]

# canonical (BullMQ) name -> validator
_VALIDATORS: dict[str, _Validator] = {
    "attempts": _int(minimum=1, maximum=MAX_COUNT),
    "backoff": _backoff,
    "delay": _int(maximum=MAX_DELAY_MS),
    "priority": _int(maximum=MAX_PRIORITY),
    "lifo": _check_bool,
    "jobId": _job_id,
    "removeOnComplete": _keep,
    "removeOnFail": _keep,
    "keepLogs": _int(maximum=MAX_COUNT),
    "stackTraceLimit": _int(),
    "sizeLimit": _int(minimum=1),
    "parent": _parent,
    "failParentOnFailure": _check_bool,
    "continueParentOnFailure": _check_bool,
    "ignoreDependencyOnFailure": _check_bool,
    "removeDependencyOnFailure": _check_bool,
    "deduplication": _deduplication,
    "timestamp": _int(maximum=MAX_TIMESTAMP_MS),
    "timeout": _int(minimum=1),
    "durable": _check_bool,
    "telemetry": _telemetry,
    "group": _group,
}

_SNAKE = {
    "job_id": "jobId",
    "remove_on_complete": "removeOnComplete",
    "remove_on_fail": "removeOnFail",
    "keep_logs": "keepLogs",
    "stack_trace_limit": "stackTraceLimit",
    "size_limit": "sizeLimit",
    "fail_parent_on_failure": "failParentOnFailure",
    "continue_parent_on_failure": "continueParentOnFailure",
    "ignore_dependency_on_failure": "ignoreDependencyOnFailure",
    "remove_dependency_on_failure": "removeDependencyOnFailure",
}
_CANONICAL: dict[str, str] = {name: name for name in _VALIDATORS} | _SNAKE


_PARENT_POLICIES = (  # at most one per job
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
    "removeDependencyOnFailure",
)
_PARENT_POLICY_SET = frozenset(_PARENT_POLICIES)


def canonical_name(name: str) -> str:
    """Map a camelCase or snake_case option name to BullMQ's name, or raise naming it."""
    try:
        return _CANONICAL[name]
    except (KeyError, TypeError):
        raise InvalidOptionsError(
            f"unknown job option {name!r}; known options: {sorted(_VALIDATORS)}", option=str(name)
        ) from None


def normalize_job_options(opts: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Return the canonical camelCase dict for `opts` and keyword options, validated."""
    if not kwargs and type(opts) is dict and len(opts) == 1 and "group" in opts:
        return {"group": _group("group", opts["group"])}  # a grouped job's only option
    result: dict[str, Any] = {}
    if not opts and not kwargs:
        if opts is None or isinstance(opts, Mapping):
            return result
        raise InvalidOptionsError(f"job options must be a mapping, got {opts!r}")
    for source in (opts or {}, kwargs):
        if type(source) is not dict and not isinstance(source, Mapping):
            raise InvalidOptionsError(f"job options must be a mapping, got {source!r}")
        for name, value in source.items():
            key = _CANONICAL.get(name) if type(name) is str else None
            if key is None:
                key = canonical_name(name)  # raises, naming it
            result[key] = _VALIDATORS[key](key, value)
    if not _PARENT_POLICY_SET.isdisjoint(result):
        _check_exclusive(result)
    if "group" in result:
        _check_grouped(result)
    return result


def _check_grouped(opts: dict[str, Any]) -> None:
    """Options a grouped job cannot have (BullMQ Pro refuses them too): its order is its
    group's (FIFO, or `group.priority`)."""
    if opts.get("lifo"):
        raise InvalidOptionsError(
            "option 'lifo' cannot be used with 'group': a group is FIFO", option="lifo"
        )
    if opts.get("priority"):
        raise InvalidOptionsError(
            f"option 'priority' ({opts['priority']!r}) cannot be used with 'group': "
            "give the group priority instead (group={'id': ..., 'priority': n})",
            option="priority",
        )


def _check_exclusive(opts: dict[str, Any]) -> None:
    """At most one parent policy (normalize_job_options calls it when one is named)."""
    policies = [name for name in _PARENT_POLICIES if opts.get(name)]
    if len(policies) > 1:
        raise InvalidOptionsError(
            f"options {policies} exclude each other; choose one", option=policies[0]
        )


def merge_job_options(defaults: Mapping[str, Any], opts: Mapping[str, Any]) -> dict[str, Any]:
    """Per-job options over queue defaults (both canonical); per-job values win. The result
    may be `opts` itself when there are no defaults."""
    if not defaults:
        return opts if type(opts) is dict else dict(opts)
    return {**defaults, **opts}


def check_keep(name: str, value: Any) -> bool | int | dict[str, Any] | None:
    """A worker's removeOnComplete/removeOnFail (for jobs without their own): as the job
    option, or None for none."""
    return None if value is None else _keep(name, value)


def check_limiter(
    value: Mapping[str, Any] | Limiter | None, name: str = "limiter"
) -> Limiter | None:
    """A worker's limiter: {'max': n, 'duration': ms}."""
    if value is None or isinstance(value, Limiter):
        return value
    if not isinstance(value, Mapping) or set(value) - {"max", "duration"}:
        raise InvalidOptionsError(
            f"{name} must be {{'max': n, 'duration': ms}}, got {value!r}", option=name
        )
    return Limiter(
        check_int(f"{name}.max", value.get("max"), minimum=1),
        check_int(f"{name}.duration", value.get("duration"), minimum=1),
    )


def check_group_limits(value: Mapping[str, Any] | GroupLimits | None) -> GroupLimits | None:
    """A worker's `group` option: {'concurrency': n, 'limit': {'max': m, 'duration': ms}}."""
    if value is None or isinstance(value, GroupLimits):
        return value
    spec = _check_mapping("group", value, {"concurrency", "limit"})
    concurrency = spec.get("concurrency")
    return GroupLimits(
        None if concurrency is None else check_int("group.concurrency", concurrency, minimum=1),
        check_limiter(spec.get("limit"), "group.limit"),
    )
