"""Export / import and queue meta on Redis: what `psyq migrate` moves (see base.py for the
contract). Export reads the live structures page by page (cursor "<state>:<offset>"), each
page's jobs in one script call (`lua/exportJobs-1.lua`); import is one script call per page
with one JSON argument (`lua/importJobs-10.lua`), all or nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from psyq.backends.base import ExportPage, JobRecord
from psyq.backends.redis.jobs import (
    DELAY_SPAN,
    MANUAL_LIMIT,
    encode_opts,
    glob_escape,
    record_from_hash,
)
from psyq.errors import PsyqError

if TYPE_CHECKING:
    from psyq.backends.redis.backend import RedisBackend

__all__ = ["export_jobs", "get_queue_meta", "import_jobs", "set_queue_meta"]

# Export order: (state shown, structure, kind). Lists are read from the right (next taken).
_LINES = (
    ("waiting", "wait", "list"),
    ("waiting", "paused", "list"),
    ("prioritized", "prioritized", "zset"),
    ("delayed", "delayed", "zset"),
    ("active", "active", "list"),
    ("waiting-children", "waiting-children", "zset"),
    ("completed", "completed", "zset"),
    ("failed", "failed", "zset"),
)


def _parse_cursor(cursor: str | None) -> tuple[int, int]:
    if cursor is None:
        return 0, 0
    line, _, offset = cursor.partition(":")
    if not (line.isdigit() and offset.isdigit() and int(line) < len(_LINES)):
        raise PsyqError(f"unknown export cursor {cursor!r}: start again with cursor=None")
    return int(line), int(offset)


async def _slice(
    backend: RedisBackend, queue: str, line: int, offset: int, count: int
) -> list[str]:
    _, structure, kind = _LINES[line]
    key = f"{backend.queue_key(queue)}:{structure}"
    if kind == "zset":
        ids: list[str] = await backend.client.zrange(key, offset, offset + count - 1)
        return ids
    found: list[str] = await backend.client.lrange(key, -(offset + count), -(offset + 1))
    return found[::-1]


async def export_jobs(
    backend: RedisBackend, queue: str, cursor: str | None, limit: int
) -> ExportPage:
    line, offset = _parse_cursor(cursor)
    chosen: list[tuple[str, str]] = []
    while line < len(_LINES) and len(chosen) < limit:
        ids = await _slice(backend, queue, line, offset, limit - len(chosen))
        chosen += [(job_id, _LINES[line][0]) for job_id in ids]
        offset += len(ids)
        if len(chosen) < limit:
            line, offset = line + 1, 0
    page = await _read_jobs(backend, queue, chosen)
    more = line < len(_LINES)
    page.next_cursor = f"{line}:{offset}" if more else None
    return page


async def _read_jobs(
    backend: RedisBackend, queue: str, chosen: list[tuple[str, str]]
) -> ExportPage:
    page = ExportPage([], {}, None)
    if not chosen:
        return page
    replies = await backend._run("exportJobs", queue, *(job_id for job_id, _ in chosen))
    for (job_id, state), reply in zip(chosen, replies, strict=True):
        flat, logs, score, pending, processed, ignored, failed = reply
        if not flat:
            continue  # removed while we read
        record = record_from_hash(queue, job_id, _pairs(flat))
        record.state = state
        page.jobs.append(record)
        if logs:
            page.logs[job_id] = logs
        if score is not None:
            page.due[job_id] = int(float(score)) // DELAY_SPAN
        if pending or processed or ignored or failed:
            reasons = await backend.get_failed_children_values(queue, job_id) if failed else {}
            page.deps[job_id] = {
                "pending": sorted(pending),
                "processed": _pairs(processed),
                "failed": reasons,
                "ignored": _pairs(ignored),
            }
    return page


def _pairs(flat: list[str]) -> dict[str, str]:
    """A hash from HGETALL's flat field/value list (as Lua returns it)."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _hash_fields(record: JobRecord) -> list[str]:
    """The job hash BullMQ stores, from a record (the reverse of record_from_hash), as a flat
    field, value list starting name, data, timestamp (importJobs reads those by place). Runs
    once per imported job: plain field reads, json only where a value needs it."""
    progress = record.progress
    fields = [
        "name", record.name,
        "data", record.data,
        "timestamp", str(record.timestamp),
        "opts", encode_opts(record.opts) if record.opts else "{}",
        "delay", str(record.delay),
        "priority", str(record.priority),
        "progress", str(progress) if type(progress) is int else json.dumps(progress),
        "atm", str(record.attempts_made),
        "ats", str(record.attempts_started),
        "stc", str(record.stalled_counter),
    ]  # fmt: skip
    for name, value in (
        ("processedOn", record.processed_on),
        ("finishedOn", record.finished_on),
        ("returnvalue", record.returnvalue),
        ("failedReason", record.failed_reason),
        ("pb", record.processed_by),
        ("parentKey", record.parent_key),
    ):
        if value is not None:
            fields += (name, str(value))
    if record.stacktrace:
        fields += ("stacktrace", json.dumps(list(record.stacktrace)))
    if record.parent_key or "deduplication" in record.opts or "repeatJobKey" in record.opts:
        for pair in _links(record).items():
            fields += pair
    return fields


def _links(record: JobRecord) -> dict[str, str]:
    opts, links = record.opts, {}
    if record.parent_key:
        queue_key, _, parent_id = record.parent_key.rpartition(":")
        parent: dict[str, Any] = {"id": parent_id, "queueKey": queue_key}
        for long, short in (
            ("failParentOnFailure", "fpof"),
            ("continueParentOnFailure", "cpof"),
            ("ignoreDependencyOnFailure", "idof"),
            ("removeDependencyOnFailure", "rdof"),
        ):
            if opts.get(long):
                parent[short] = True
        links["parent"] = json.dumps(parent)
    if isinstance(opts.get("deduplication"), Mapping):
        links["deid"] = str(opts["deduplication"]["id"])
    if opts.get("repeatJobKey"):
        links["rjk"] = str(opts["repeatJobKey"])
    return links


async def import_jobs(backend: RedisBackend, queue: str, page: ExportPage, overwrite: bool) -> int:
    if not page.jobs:
        return 0
    args = []
    for record in page.jobs:
        entry: dict[str, Any] = {
            "id": record.id,
            "state": record.state or "waiting",
            "fields": _hash_fields(record),
            "logs": page.logs.get(record.id, []),
        }
        if record.id in page.due:
            entry["due"] = page.due[record.id]
        elif record.state == "delayed":
            entry["due"] = record.timestamp + record.delay
        if record.id in page.deps:
            entry["deps"] = page.deps[record.id]
        args.append(entry)
    page_json = json.dumps(args, separators=(",", ":"))
    outcome, value = await backend._run("importJobs", queue, int(overwrite), page_json)
    if outcome == "conflict":
        raise PsyqError(
            f"cannot import job {value!r} into {queue!r}: a different job has that id "
            "(pass overwrite=True to replace it)"
        )
    return int(value)


async def get_queue_meta(backend: RedisBackend, queue: str) -> dict[str, Any]:
    key = backend.queue_key(queue)
    client = backend.client
    async with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(key + ":meta").get(key + ":id").get(key + ":limiter").pttl(key + ":limiter")
        meta, last_id, used, ttl = await pipe.execute()
    now = await backend.now_ms()
    limited = used is not None and int(used) >= MANUAL_LIMIT and int(ttl) > 0
    max_jobs, duration = meta.get("max"), meta.get("duration")
    return {
        "paused": "paused" in meta,
        "last_id": int(last_id or 0),
        "limited_until": now + int(ttl) if limited else 0,
        "global_limiter": [int(max_jobs), int(duration)] if max_jobs and duration else None,
        "global_concurrency": int(meta["concurrency"]) if meta.get("concurrency") else None,
        "dedup": await _dedup_keys(backend, queue, now),
        "schedulers": await _schedulers(backend, queue),
        "max_len_events": int(meta.get("opts.maxLenEvents") or 10_000),
    }


async def _dedup_keys(backend: RedisBackend, queue: str, now: int) -> dict[str, Any]:
    prefix = f"{backend.queue_key(queue)}:de:"
    # SCAN walks the whole keyspace: large steps keep a server of millions of job keys to a
    # few hundred round trips per queue
    found: dict[str, Any] = {}
    async for key in backend.client.scan_iter(match=glob_escape(prefix) + "*", count=10_000):
        owner, ttl = await backend.client.get(key), await backend.client.pttl(key)
        if owner is not None:
            found[key[len(prefix) :]] = [owner, now + ttl if ttl > 0 else None]
    return found


async def _schedulers(backend: RedisBackend, queue: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for entry in await backend.get_job_schedulers(queue, 0, -1, True):
        spec = {k: v for k, v in entry.items() if k not in ("key", "name", "template")}
        template = entry["template"]
        spec["template"] = [entry["name"], template["data"], template["opts"], None]
        nxt = entry["next"]
        spec["pending"] = None if nxt is None else f"repeat:{entry['key']}:{nxt}"
        found[entry["key"]] = spec
    return found


async def set_queue_meta(backend: RedisBackend, queue: str, meta: Mapping[str, Any]) -> None:
    key = backend.queue_key(queue)
    client = backend.client
    current = int(await client.get(key + ":id") or 0)
    if int(meta.get("last_id") or 0) > current:
        await client.set(key + ":id", int(meta["last_id"]))
    limiter = meta.get("global_limiter")
    if limiter:
        await client.hset(key + ":meta", mapping={"max": limiter[0], "duration": limiter[1]})
    if meta.get("global_concurrency"):
        await client.hset(key + ":meta", "concurrency", int(meta["global_concurrency"]))
    await client.hset(key + ":meta", "opts.maxLenEvents", int(meta.get("max_len_events") or 10_000))
    now = await backend.now_ms()
    if int(meta.get("limited_until") or 0) > now:
        await client.set(key + ":limiter", MANUAL_LIMIT, px=int(meta["limited_until"]) - now)
    for dedup_id, (owner, expiry) in (meta.get("dedup") or {}).items():
        ttl = None if expiry is None else max(1, int(expiry) - now)
        await client.set(f"{key}:de:{dedup_id}", owner, px=ttl)
    for scheduler_id, spec in (meta.get("schedulers") or {}).items():
        await _set_scheduler(backend, queue, scheduler_id, spec)
    if meta.get("paused"):
        await backend.pause(queue)


async def _set_scheduler(
    backend: RedisBackend, queue: str, scheduler_id: str, spec: Mapping[str, Any]
) -> None:
    name, data, opts, _timestamp = spec["template"]
    fields: dict[str, Any] = {"name": name, "data": data, "opts": encode_opts(opts)}
    for field in ("every", "pattern", "tz", "limit", "startDate", "endDate"):
        if spec.get(field) is not None:
            fields[field] = spec[field]
    if "immediately" in spec:
        fields["immediately"] = "true" if spec["immediately"] else "false"
    nxt = spec.get("next")
    fields["ic"] = int(spec.get("iterationCount") or 0)
    fields["next"] = "" if nxt is None else int(nxt)
    key = f"{backend.queue_key(queue)}:repeat"
    await backend.client.hset(f"{key}:{scheduler_id}", mapping=fields)
    await backend.client.zadd(key, {scheduler_id: 0 if nxt is None else int(nxt)})
