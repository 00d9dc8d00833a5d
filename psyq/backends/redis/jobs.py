"""Job hashes as BullMQ stores them <-> `JobRecord`, and BullMQ's opts key compression."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

from psyq.backends.base import JobRecord, NewJob
from psyq.rules import codec

__all__ = [
    "DELAY_SPAN",
    "MANUAL_LIMIT",
    "PRIORITY_SPAN",
    "RECORD_FIELDS",
    "SKIP_LOCK_TOKEN",
    "add_args",
    "add_meta",
    "decode_opts",
    "encode_opts",
    "glob_escape",
    "record_from_fields",
    "record_from_hash",
    "record_from_values",
]

# Score encodings and sentinels of BullMQ's layout (the Lua side has the same in base.lua).
PRIORITY_SPAN = 2**32  # prioritized score = priority * 2^32 + counter
DELAY_SPAN = 0x1000  # delayed score = due ms * 4096 + sequence
MANUAL_LIMIT = 2**53 - 1  # JavaScript's MAX_SAFE_INTEGER: BullMQ's rateLimit(ms) sets it
SKIP_LOCK_TOKEN = "0"  # BullMQ's token that skips the lock check


def glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


# BullMQ's optsEncodeMap (utils/index.ts): long option names stored under short keys.
_ENCODE = {
    "deduplication": "de",
    "failParentOnFailure": "fpof",
    "continueParentOnFailure": "cpof",
    "ignoreDependencyOnFailure": "idof",
    "removeDependencyOnFailure": "rdof",
    "keepLogs": "kl",
}
_DECODE = {short: long for long, short in _ENCODE.items()}
# BullMQ keeps the `telemetry` option's two fields as top-level keys of the stored options.
_TELEMETRY = {"metadata": "tm", "omitContext": "omc"}
_TELEMETRY_KEYS = {short: long for long, short in _TELEMETRY.items()}


def encode_opts(opts: Mapping[str, Any]) -> str:
    if not opts:
        return "{}"
    stored = {_ENCODE.get(k, k): v for k, v in opts.items() if k != "telemetry"}
    telemetry = dict(opts.get("telemetry") or {})
    for field, short in _TELEMETRY.items():
        if field in telemetry:
            stored[short] = telemetry.pop(field)
    if telemetry:  # fields BullMQ does not know stay where they were
        stored["telemetry"] = telemetry
    return json.dumps(stored, separators=(",", ":"))


def _parse_opts(text: str) -> dict[str, Any]:
    raw = json.loads(text)
    if not isinstance(raw, dict):
        return {}
    opts: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _TELEMETRY_KEYS:
            opts.setdefault("telemetry", {})[_TELEMETRY_KEYS[key]] = value
        elif key == "telemetry" and isinstance(value, dict):
            opts.setdefault("telemetry", {}).update(value)
        else:
            opts[_DECODE.get(str(key), str(key))] = value
    return opts


# A job's options from its `opts` field, compressed keys spelled out.
decode_opts = codec.options_parser(_parse_opts)


# The options add_meta reads: a job with none of them (and no timestamp of its own) goes to
# addJobs as its bare name.
_META_OPTS = frozenset(
    ("jobId", "delay", "priority", "lifo", "parent", "deduplication", "repeatJobKey", "group")
)


_META_OPTS_BUT_GROUP = _META_OPTS - {"group"}


def add_args(jobs: Sequence[NewJob]) -> bytes:
    """The jobs as the addJobs script reads them: one MessagePack array, three values per
    job (its name, [name, group id, group priority] for a job with only a group, or its
    meta map when it has more add-time fields; data; opts). One C call packs them all: a
    JSON text per meta and three RESP strings per job cost ~3 us a job. The opts of jobs
    with only a group are encoded once per group and call."""
    flat: list[Any] = []
    group_opts: dict[tuple[str, int], str] = {}
    for new in jobs:
        opts = new.opts
        if new.timestamp is None and _META_OPTS.isdisjoint(opts):
            flat += (new.name, new.data, encode_opts(opts) if opts else "{}")
            continue
        head = _grouped_head(new)
        if head is None:
            flat += (meta_fields(new), new.data, encode_opts(opts))
        elif len(opts) == 1:  # only the group: its opts text is the same for the group's jobs
            key = (head[1], head[2])
            text = group_opts.get(key)
            if text is None:
                text = group_opts[key] = encode_opts(opts)
            flat += (head, new.data, text)
        else:
            flat += (head, new.data, encode_opts(opts))
    packed: bytes = msgpack.packb(flat)
    return packed


def _grouped_head(new: NewJob) -> list[Any] | None:
    """[name, group id, group priority] for a job whose only add-time field is a group
    without maxSize (addJobs gathers those per group), else None."""
    opts = new.opts
    group = opts.get("group")
    if group is None or new.timestamp is not None or "maxSize" in group:
        return None
    if len(opts) > 1 and not _META_OPTS_BUT_GROUP.isdisjoint(opts):
        return None
    return [new.name, str(group["id"]), int(group.get("priority") or 0)]


def add_meta(new: NewJob, hold: bool = False, parent_flags: bool = False) -> str:
    """The per-job header the addFlow and addJobScheduler scripts read (JSON)."""
    return json.dumps(meta_fields(new, hold, parent_flags), separators=(",", ":"))


def meta_fields(new: NewJob, hold: bool = False, parent_flags: bool = False) -> dict[str, Any]:
    """A job's add-time fields for the add scripts. `parent_flags`: a flow child whose
    parent link (id, queue) the script fills in; only its policy flags here."""
    opts = new.opts
    meta: dict[str, Any] = {"name": new.name}
    if new.timestamp is not None:
        meta["ts"] = new.timestamp
    if "jobId" in opts:
        meta["id"] = opts["jobId"]
    for name in ("delay", "priority", "lifo"):
        if opts.get(name):
            meta[name] = opts[name]
    if hold:
        meta["hold"] = True
    link = _parent_meta(opts, parent_flags)
    if link is not None:
        meta["parent"] = link
    if "deduplication" in opts:
        meta["dedup"] = opts["deduplication"]
    if "repeatJobKey" in opts:
        meta["rjk"] = opts["repeatJobKey"]
    if "group" in opts:
        meta["group"] = group_meta(opts["group"])
    return meta


def _parent_meta(opts: Mapping[str, Any], parent_flags: bool) -> dict[str, Any] | None:
    """The parent link and its policy flags (only the flags for a flow child)."""
    flags = {_ENCODE[k]: True for k in _ENCODE if opts.get(k) is True}
    parent = opts.get("parent")
    if parent is not None:
        return {"id": parent["id"], "queue": parent["queue"], **flags}
    return flags if parent_flags else None


def group_meta(group: Mapping[str, Any]) -> dict[str, Any]:
    """A job's group as the add scripts read it (groups.lua): id, priority, maxSize."""
    meta: dict[str, Any] = {"id": str(group["id"])}
    if group.get("priority"):
        meta["priority"] = int(group["priority"])
    if group.get("maxSize"):
        meta["maxSize"] = int(group["maxSize"])
    return meta


def _int(value: str | None, default: int = 0) -> int:
    if not value:
        return default
    try:
        return int(value)  # the usual case: Redis integers
    except ValueError:
        return int(float(value))


def _json(value: str | None, default: Any) -> Any:
    if value is None:
        return default
    if value == "[]":
        return []
    try:
        return json.loads(value)
    except ValueError:
        return value


# The hash fields a JobRecord is read from, in `record_from_values`' order (an export reads
# them with one HMGET in this order: transfer.py).
RECORD_FIELDS = (
    "name", "data", "opts", "timestamp", "delay", "priority", "progress", "atm",
    "attemptsMade", "ats", "stc", "processedOn", "finishedOn", "returnvalue", "failedReason",
    "stacktrace", "parentKey", "pb",
)  # fmt: skip


def record_from_hash(queue: str, job_id: str, fields: Mapping[str, str]) -> JobRecord:
    """A JobRecord from a job hash (HGETALL as a dict)."""
    return record_from_values(queue, job_id, [fields.get(name) for name in RECORD_FIELDS])


def record_from_values(
    queue: str, job_id: str, values: Sequence[str | None], state: str | None = None
) -> JobRecord:
    """A JobRecord from the values of RECORD_FIELDS, in order (None: absent). Runs once
    per job read (an export reads a million), so it calls nothing for what is absent, "0"
    or "{}" (most fields of most jobs), and `int` only on the numbers left. A number `int`
    refuses (a float such as "1.5e3") is read as a float, the record made again."""
    (name, data, opts, timestamp, delay, priority, progress, atm, attempts_made, ats, stc,
     processed_on, finished_on, returnvalue, failed_reason, stacktrace, parent_key,
     processed_by) = values  # fmt: skip
    attempts = atm or attempts_made
    try:
        return JobRecord(
            job_id,
            queue,
            "" if name is None else name,
            "null" if data is None else data,
            decode_opts(opts) if opts and opts != "{}" else {},
            int(timestamp) if timestamp else 0,
            int(delay) if delay and delay != "0" else 0,
            int(priority) if priority and priority != "0" else 0,
            0 if progress is None or progress == "0" else _json(progress, 0),
            int(attempts) if attempts and attempts != "0" else 0,
            int(ats) if ats and ats != "0" else 0,
            int(stc) if stc and stc != "0" else 0,
            int(processed_on) if processed_on else None,
            int(finished_on) if finished_on else None,
            returnvalue,
            failed_reason,
            _stacktrace(stacktrace) if stacktrace else (),
            parent_key,
            processed_by,
            None,
            state,
        )
    except ValueError:
        whole = _whole_numbers(values)
        if whole == list(values):
            raise  # not a number's doing (e.g. opts that are not JSON)
        return record_from_values(queue, job_id, whole, state)


# The places of the number fields in RECORD_FIELDS.
_NUMBER_FIELDS = (
    "timestamp", "delay", "priority", "atm", "attemptsMade", "ats", "stc", "processedOn",
    "finishedOn",
)  # fmt: skip
_NUMBERS = frozenset(RECORD_FIELDS.index(name) for name in _NUMBER_FIELDS)


def _whole_numbers(values: Sequence[str | None]) -> list[str | None]:
    """`values` with each number that is there written as the whole number it reads as
    ("1.5e3" -> "1500"); absent and empty ones stay as they are."""
    return [
        str(_int(value)) if value and place in _NUMBERS else value
        for place, value in enumerate(values)
    ]


def _stacktrace(text: str | None) -> Sequence[str]:
    if not text:
        return ()  # the shared empty tuple: most jobs
    stack = _json(text, ())
    return list(stack) if isinstance(stack, list) else ()


def record_from_fields(queue: str, flat: Sequence[str], state: str | None = None) -> JobRecord:
    """A JobRecord from a script's flat field/value list with `__id` (and `__state`, unless
    the caller knows the state)."""
    pairs = iter(flat)
    fields = dict(zip(pairs, pairs, strict=True))  # field, value, field, value, ...
    values = [fields.get(name) for name in RECORD_FIELDS]
    return record_from_values(queue, fields.get("__id", ""), values, state or fields.get("__state"))
