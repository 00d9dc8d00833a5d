"""Job scheduler specs: validation, and the time of the next run.

A spec is `{"every": ms}` or `{"pattern": cron, "tz": name}`, with optional `start_date`,
`end_date` (ms since the epoch, or datetimes), `limit` (most runs) and `immediately` (the
first run now). Cron patterns have 5 fields, or 6 with seconds first (as in BullMQ), and run
in `tz` (default UTC) with DST handled as cron does: a skipped local time runs at the next
valid time, a repeated one runs once. As in BullMQ (cron-parser), `?` means `*` and the
aliases @yearly, @annually, @monthly, @weekly, @daily and @hourly are accepted, so a
scheduler Node BullMQ made runs here too; the pattern is stored as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from psyq.errors import InvalidOptionsError
from psyq.rules.limits import MAX_COUNT, MAX_DELAY_MS, MAX_TIMESTAMP_MS, check_int

__all__ = ["first_run", "next_run", "normalize_repeat", "upserted_run"]

_NAMES = {
    "every": "every",
    "pattern": "pattern",
    "tz": "tz",
    "limit": "limit",
    "immediately": "immediately",
    "startDate": "startDate",
    "start_date": "startDate",
    "endDate": "endDate",
    "end_date": "endDate",
}


def normalize_repeat(repeat: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical (camelCase) spec, or InvalidOptionsError naming the bad value."""
    if not isinstance(repeat, Mapping):
        raise InvalidOptionsError(f"a scheduler's repeat must be a mapping, got {repeat!r}")
    spec: dict[str, Any] = {}
    for name, value in repeat.items():
        if name not in _NAMES:
            raise InvalidOptionsError(
                f"unknown repeat option {name!r}; known: {sorted(set(_NAMES.values()))}",
                option=str(name),
            )
        spec[_NAMES[name]] = value
    if ("every" in spec) == ("pattern" in spec):
        raise InvalidOptionsError(f"repeat needs exactly one of 'every' or 'pattern': {repeat!r}")
    if "every" in spec:
        check_int("every", spec["every"], minimum=1, maximum=MAX_DELAY_MS)
    else:
        _check_pattern(spec["pattern"], spec.get("tz"))
    for name in ("startDate", "endDate"):
        if name in spec:
            spec[name] = _ms(name, spec[name])
    if "limit" in spec:
        check_int("limit", spec["limit"], minimum=1, maximum=MAX_COUNT)
    if not isinstance(spec.get("immediately", False), bool):
        raise InvalidOptionsError(f"immediately must be a bool, got {spec['immediately']!r}")
    return spec


def _zone(tz: Any) -> ZoneInfo:
    if tz is None:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(str(tz))
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidOptionsError(f"unknown time zone tz={tz!r}", option="tz") from None


_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _cron(pattern: str) -> str:
    """`pattern` as cronsim reads it (see the module's docstring)."""
    text = pattern.strip()
    return _ALIASES.get(text.lower(), text.replace("?", "*"))


def _check_pattern(pattern: Any, tz: Any) -> None:
    if not isinstance(pattern, str):
        raise InvalidOptionsError(f"pattern must be a cron string, got {pattern!r}")
    try:
        CronSim(_cron(pattern), datetime.now(_zone(tz)))
    except CronSimError as exc:
        raise InvalidOptionsError(
            f"cron pattern {pattern!r} does not parse: {exc}", option="pattern"
        ) from None


def _ms(name: str, value: Any) -> int:
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    return check_int(name, value, maximum=MAX_TIMESTAMP_MS)


def _after(spec: Mapping[str, Any], after_ms: int) -> int:
    """The first run strictly after `after_ms` (ignoring start/end/limit)."""
    if "every" in spec:
        every: int = spec["every"]
        return after_ms + every
    zone = _zone(spec.get("tz"))
    moment = datetime.fromtimestamp(after_ms / 1000, zone)
    return int(next(CronSim(_cron(spec["pattern"]), moment)).timestamp() * 1000)


def _bounded(spec: Mapping[str, Any], millis: int, count: int) -> int | None:
    if "limit" in spec and count >= spec["limit"]:
        return None
    if "endDate" in spec and millis > spec["endDate"]:
        return None
    return millis


def first_run(spec: Mapping[str, Any], now: int) -> int | None:
    """When the first job of a new (or replaced) scheduler runs."""
    start = max(now, spec.get("startDate", now))
    if spec.get("immediately") or "every" in spec:
        return _bounded(spec, start, 0)
    return _bounded(spec, _after(spec, start - 1), 0)


def next_run(spec: Mapping[str, Any], prev_ms: int, count: int, now: int) -> int | None:
    """The run after `prev_ms` (`count` runs so far); never in the past; None when done."""
    millis = _after(spec, prev_ms)
    if millis < now and "every" in spec:
        every: int = spec["every"]
        millis += ((now - millis) // every + 1) * every
    elif millis < now:
        millis = _after(spec, now - 1)
    return _bounded(spec, millis, count)


def upserted_run(
    spec: Mapping[str, Any],
    now: int,
    current: Mapping[str, Any] | None,
    current_ms: int | None,
    replaced: bool,
) -> int | None:
    """When the first run of an upserted scheduler is, as BullMQ's addJobScheduler decides
    (its issue 2988): a scheduler that keeps its `every` keeps the time of its current run
    (`current_ms`, of the spec `current`) while that run was still pending (`replaced`: the
    upsert replaces it at the same time), or takes the slot after it once it has started;
    a new scheduler, a changed `every` and a pattern start afresh (a pattern's next match
    is where its pending run was). So the same upsert run again adds no run."""
    if current is None or not current_ms or "every" not in spec:
        return first_run(spec, now)
    if current.get("every") != spec["every"]:
        return first_run(spec, now)
    if replaced:
        return _bounded(spec, current_ms, 0)
    return next_run(spec, current_ms, 0, now)
