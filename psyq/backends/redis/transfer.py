"""Export / import and queue meta on Redis: what `psyq migrate` moves (see base.py for the
contract). Export reads the live structures page by page (cursor "<state>:<offset>"), each
page's jobs in one MULTI/EXEC of plain reads (`_read_jobs`); import is one script call per
page with one MessagePack argument (`lua/importJobs-10.lua`), all or nothing.

The functions take the backend's connection layer (`RedisConnection`: client, keys, script
calls, MULTI/EXEC), all they use of it, so this module sits below `backend.py`."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

import msgpack

from psyq.backends.base import ExportPage, JobRecord, QueueMeta
from psyq.backends.meta import exported_schedulers
from psyq.backends.redis.connection import RedisConnection
from psyq.backends.redis.groups import group_settings, grouped_waiting_ids, set_group_settings
from psyq.backends.redis.jobs import (
    DELAY_SPAN,
    MANUAL_LIMIT,
    RECORD_FIELDS,
    encode_opts,
    glob_escape,
    record_from_values,
)
from psyq.backends.redis.scripts import key_command
from psyq.errors import PsyqError

_packb = msgpack.Packer().pack


__all__ = [
    "QueueScan",
    "export_jobs",
    "get_queue_meta",
    "import_jobs",
    "scan_queues",
    "set_queue_meta",
]

# Export order: (state shown, structure, kind). Lists are read from the right (next taken).
_LINES = (
    ("waiting", "wait", "list"),
    ("waiting", "paused", "list"),
    ("waiting", "groups", "grouped"),  # every group's line, group by group
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
    backend: RedisConnection, queue: str, line: int, offset: int, count: int, due: dict[str, int]
) -> list[str]:
    """Up to `count` ids of a line from `offset`; the delayed line's due times go to `due`
    (read with the ids: the page read needs no score)."""
    _, structure, kind = _LINES[line]
    key = f"{backend.queue_key(queue)}:{structure}"
    end = offset + count - 1
    if structure == "delayed":
        scored: list[tuple[str, float]] = await backend.client.zrange(
            key, offset, end, withscores=True
        )
        due.update((job_id, int(score) // DELAY_SPAN) for job_id, score in scored)
        return [job_id for job_id, _ in scored]
    if kind == "zset":
        ids: list[str] = await backend.client.zrange(key, offset, end)
        return ids
    if kind == "grouped":
        return (await grouped_waiting_ids(backend, queue))[offset : end + 1]
    found: list[str] = await backend.client.lrange(key, -(offset + count), -(offset + 1))
    return found[::-1]


async def export_jobs(
    backend: RedisConnection, queue: str, cursor: str | None, limit: int
) -> ExportPage:
    line, offset = _parse_cursor(cursor)
    chosen: list[tuple[str, list[str]]] = []  # (state, ids) per line read
    count = 0
    page = ExportPage([], {}, None)
    while line < len(_LINES) and count < limit:
        ids = await _slice(backend, queue, line, offset, limit - count, page.due)
        if ids:
            chosen.append((_LINES[line][0], ids))
        count += len(ids)
        offset += len(ids)
        if count < limit:
            line, offset = line + 1, 0
    if chosen:
        await _read_jobs(backend, queue, chosen, page)
    more = line < len(_LINES)
    page.next_cursor = f"{line}:{offset}" if more else None
    return page


# A page is read in one MULTI/EXEC of plain commands (no script: Redis answers the same
# reads from Lua at over twice the CPU): per job an HGETALL of its hash, and per CHUNK of
# jobs one EXISTS of their logs keys and one of their children keys. Only the chunks where
# those found some are read further, in a second MULTI/EXEC (most jobs have neither).
# HGETALL, not an HMGET of RECORD_FIELDS: Redis parses, queues and frees two arguments per
# job instead of twenty and walks the few fields a job has (about 6 waiting, 11 finished)
# instead of looking up 18, and the reply names only the fields there.
_CHUNK = 64
_LOG_KEYS = (b":logs",)
_CHILD_KEYS = (b":dependencies", b":processed", b":failed", b":unsuccessful")
_lrange = key_command("LRANGE", 0, -1)
_smembers = key_command("SMEMBERS")
_hgetall = key_command("HGETALL")
_zrange = key_command("ZRANGE", 0, -1)


async def _read_jobs(
    backend: RedisConnection, queue: str, chosen: list[tuple[str, list[str]]], page: ExportPage
) -> None:
    """The chosen jobs (state, ids) into `page`. A job removed since its id was read (its
    hash has no field left, or none a record is read from) is left out."""
    ids = list(chain.from_iterable(line_ids for _, line_ids in chosen))
    commands = _page_reads(f"{backend.queue_key(queue)}:", ids)
    count = len(ids) + len(commands) - 1  # the HGETALLs come packed as one part
    replies = await backend._transaction("export", queue, b"".join(commands), count)
    gone = _add_records(queue, chosen, replies, page)
    checks = replies[len(ids) :]  # per chunk: logs found, children keys found
    logged = _flagged(ids, checks[0::2], gone)
    parents = _flagged(ids, checks[1::2], gone)
    if logged or parents:
        await _read_more(backend, queue, logged, parents, page)


def _add_records(
    queue: str, chosen: list[tuple[str, list[str]]], replies: list[Any], page: ExportPage
) -> set[str]:
    """A record per HGETALL reply into `page`; returns the ids of the jobs removed
    meanwhile (usually none). Values are picked by place from each flat field, value, ...
    reply, with a picker made once per order of field names (jobs written alike list
    their fields alike): no dict per job."""
    if replies and isinstance(replies[0], dict):  # RESP3 maps (redis-py may speak it)
        replies = [_flat(reply) for reply in replies if isinstance(reply, dict)]
    records, gone = page.jobs, set[str]()
    names: list[str] | None = None
    pick = None
    hashes = iter(replies)
    for state, ids in chosen:
        for job_id, flat in zip(ids, hashes, strict=False):
            if flat[0::2] != names:
                names = flat[0::2]
                pick = _picker(tuple(names))
            if pick is None:  # no field a record is read from: removed while we read
                page.due.pop(job_id, None)
                gone.add(job_id)
                continue
            flat.append(None)  # the value of the fields not there
            records.append(record_from_values(queue, job_id, pick(flat), state))
    return gone


def _flat(hash_: dict[str, str]) -> list[str]:
    """A hash as HGETALL lists it in RESP2: field, value, field, value, ..."""
    return [item for pair in hash_.items() for item in pair]


@functools.lru_cache(maxsize=256)
def _picker(names: tuple[str, ...]) -> Callable[[list[Any]], tuple[Any, ...]] | None:
    """A getter of the values of RECORD_FIELDS, in order, from a flat HGETALL reply whose
    fields are `names` once a None is appended (read for the fields not there); None if
    the hash has none of them. An itemgetter: one C call per job (a comprehension of the
    18 places costs about three times as many instructions)."""
    where = {name: 2 * place + 1 for place, name in enumerate(names)}
    if where.keys().isdisjoint(RECORD_FIELDS):
        return None
    return itemgetter(*(where.get(name, -1) for name in RECORD_FIELDS))


def _flagged(ids: list[str], flags: list[int], gone: set[str]) -> list[str]:
    """The ids of the chunks whose flag (an EXISTS count) is set, less those `gone`: a
    slice per chunk, not a test per job."""
    found: list[str] = []
    for chunk, flag in enumerate(flags):
        if flag:
            found += ids[chunk * _CHUNK : (chunk + 1) * _CHUNK]
    return [job_id for job_id in found if job_id not in gone] if gone else found


def _page_reads(prefix: str, ids: list[str]) -> list[bytes]:
    """The first MULTI/EXEC of a page, packed: an HGETALL per job, then per chunk of jobs
    the EXISTS of their logs keys and the EXISTS of their children keys."""
    packed_prefix, packed_ids = prefix.encode(), list(map(str.encode, ids))
    commands = [_hgetalls(packed_prefix, packed_ids)]
    for first in range(0, len(packed_ids), _CHUNK):
        chunk = packed_ids[first : first + _CHUNK]
        commands.append(_exists(packed_prefix, chunk, _LOG_KEYS))
        commands.append(_exists(packed_prefix, chunk, _CHILD_KEYS))
    return commands


def _hgetalls(prefix: bytes, ids: list[bytes]) -> bytes:
    """An HGETALL per id, in order, packed: a run of ids of one length shares its command
    and key header, so each run packs with one join (not a format per job)."""
    parts = []
    for size, run in groupby(ids, key=len):
        head = b"*2\r\n$7\r\nHGETALL\r\n$%d\r\n%b" % (len(prefix) + size, prefix)
        parts.append(head + (b"\r\n" + head).join(run) + b"\r\n")
    return b"".join(parts)


def _exists(prefix: bytes, ids: list[bytes], suffixes: tuple[bytes, ...]) -> bytes:
    """EXISTS of prefix + id + suffix for every id and suffix, packed. The keys go in any
    order (only the count is read): ids of one length share their bulk header, so each
    run of them packs with one join instead of a format per key (~0.5 us each)."""
    parts = []
    for size, group in _runs(ids):
        for suffix in suffixes:
            head = b"$%d\r\n%b" % (len(prefix) + size + len(suffix), prefix)
            parts.append(head + (suffix + b"\r\n" + head).join(group) + suffix + b"\r\n")
    return b"*%d\r\n$6\r\nEXISTS\r\n%b" % (len(ids) * len(suffixes) + 1, b"".join(parts))


_RUNS = 4  # runs of one id length a chunk packs as they come; more: sorted first


def _runs(ids: list[bytes]) -> list[tuple[int, list[bytes]]]:
    """`ids` in runs of one length: as they come (usually one or two runs: ids counted up),
    or sorted by length first when lengths alternate (ids chosen by users), so a chunk
    packs with one join per length, not one per id."""
    runs = [(size, list(run)) for size, run in groupby(ids, key=len)]
    if len(runs) > _RUNS:
        runs = [(size, list(run)) for size, run in groupby(sorted(ids, key=len), key=len)]
    return runs


async def _read_more(
    backend: RedisConnection, queue: str, logged: list[str], parents: list[str], page: ExportPage
) -> None:
    """Logs of the jobs in `logged` and children links of those in `parents` (jobs whose
    chunk has some: most have none, and are left out)."""
    prefix = f"{backend.queue_key(queue)}:"
    commands = [_lrange(f"{prefix}{job_id}:logs") for job_id in logged]
    for job_id in parents:
        key = prefix + job_id
        commands += (
            _smembers(key + ":dependencies"),
            _hgetall(key + ":processed"),
            _hgetall(key + ":failed"),
            _zrange(key + ":unsuccessful"),
        )
    replies = await backend._transaction("export", queue, b"".join(commands), len(commands))
    for job_id, logs in zip(logged, replies, strict=False):
        if logs:
            page.logs[job_id] = logs
    links = iter(replies[len(logged) :])  # four replies per parent
    fours = zip(links, links, links, links, strict=True)
    for job_id, (pending, processed, ignored, failed) in zip(parents, fours, strict=True):
        if pending or processed or ignored or failed:
            reasons = await backend.get_failed_children_values(queue, job_id) if failed else {}
            page.deps[job_id] = {
                "pending": sorted(pending),
                "processed": _pairs(processed),
                "failed": reasons,
                "ignored": _pairs(ignored),
            }


def _pairs(flat: list[str] | dict[str, str]) -> dict[str, str]:
    """A hash from HGETALL's flat field/value list (RESP2), or its map (RESP3, as redis-py
    8 may speak it)."""
    if isinstance(flat, dict):
        return flat
    if not flat:
        return {}
    items = iter(flat)
    return dict(zip(items, items, strict=True))  # field, value, field, value, ...


def _add_hash_fields(fields: list[Any], record: JobRecord) -> None:
    """Append to `fields` the job hash BullMQ stores, from a record (the reverse of
    record_from_hash), as field, value items starting name, data, timestamp (importJobs
    reads those by place). Counters and progress at 0 are left out, as BullMQ's addJob
    leaves them (a hash field costs the import ~0.6 µs of Redis time). Runs once per
    imported job: straight-line field reads, json only where a value needs it."""
    opts, delay, priority = record.opts, record.delay, record.priority
    fields += (
        "name", record.name,
        "data", record.data,
        "timestamp", str(record.timestamp),
        "opts", encode_opts(opts) if opts else "{}",
        "delay", str(delay) if delay else "0",
        "priority", str(priority) if priority else "0",
    )  # fmt: skip
    _add_attempt_fields(fields, record)
    _add_outcome_fields(fields, record)
    if "group" in opts:  # the job's group, as the add scripts store it (groups.lua)
        group = opts["group"]
        fields += ("gid", str(group["id"]), "gpr", str(group.get("priority") or 0))
    if record.parent_key or "deduplication" in opts or "repeatJobKey" in opts:
        for pair in _links(record).items():
            fields += pair


def _add_attempt_fields(fields: list[Any], record: JobRecord) -> None:
    """The hash fields of a job's run so far: progress, attempt counters, processedOn."""
    progress = record.progress
    if progress != 0 or type(progress) is not int:
        fields += ("progress", str(progress) if type(progress) is int else json.dumps(progress))
    if record.attempts_made:  # absent reads as 0, as in a hash BullMQ's addJob writes
        fields += ("atm", str(record.attempts_made))
    if record.attempts_started:
        fields += ("ats", str(record.attempts_started))
    if record.stalled_counter:
        fields += ("stc", str(record.stalled_counter))
    if record.processed_on is not None:
        fields += ("processedOn", str(record.processed_on))


def _add_outcome_fields(fields: list[Any], record: JobRecord) -> None:
    """The hash fields a finished job has (finishedOn, its result or reason, the worker
    that ran it), its parent's key and its stack trace, each only when set."""
    if record.finished_on is not None:
        fields += ("finishedOn", str(record.finished_on))
    if record.returnvalue is not None:
        fields += ("returnvalue", record.returnvalue)
    if record.failed_reason is not None:
        fields += ("failedReason", record.failed_reason)
    if record.processed_by is not None:
        fields += ("pb", record.processed_by)
    if record.parent_key is not None:
        fields += ("parentKey", record.parent_key)
    if record.stacktrace:
        fields += ("stacktrace", json.dumps(list(record.stacktrace)))


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


async def import_jobs(
    backend: RedisConnection, queue: str, page: ExportPage, overwrite: bool
) -> int:
    if not page.jobs:
        return 0
    packed = _packb(_import_page(page))  # MessagePack: ~3x cheaper than JSON, both ends
    outcome, value = await backend._run("importJobs", queue, int(overwrite), packed)
    if outcome == "conflict":
        raise PsyqError(
            f"cannot import job {value!r} into {queue!r}: a different job has that id "
            "(pass overwrite=True to replace it)"
        )
    return int(value)


def _import_page(page: ExportPage) -> list[Any]:
    """The page as importJobs reads it: the job count, then per job its id, state, the
    number of hash items, the items, and an extra (False, or its logs, due time, links)."""
    logs, due, deps = page.logs, page.due, page.deps
    flat: list[Any] = [len(page.jobs)]
    for record in page.jobs:
        job_id, state = record.id, record.state or "waiting"
        start = len(flat)
        flat += (job_id, state, 0)
        _add_hash_fields(flat, record)
        flat[start + 2] = len(flat) - start - 3  # the number of hash items
        if job_id in logs or job_id in due or job_id in deps or state == "delayed":
            flat.append(_extra(record, state, page))
        else:
            flat.append(False)
    return flat


def _extra(record: JobRecord, state: str, page: ExportPage) -> dict[str, Any]:
    job_id = record.id
    extra: dict[str, Any] = {}
    if job_id in page.logs:
        extra["logs"] = page.logs[job_id]
    if job_id in page.due:
        extra["due"] = page.due[job_id]
    elif state == "delayed":
        extra["due"] = record.timestamp + record.delay
    if job_id in page.deps:
        extra["deps"] = page.deps[job_id]
    return extra


# Keys of a queue that show it exists (settings, id counter, event stream), and the folder
# of its deduplication keys. One SCAN pattern matches all four (`scan_queues`): after the
# queue name, a part starting m/i/e/d then e/d/v ("meta", "id", "events", "de:<id>"), with
# a few false hits (":delayed", job ids like "ev1") that the exact check drops.
_MARKERS = (":meta", ":id", ":events")
_DEDUP = ":de:"
_SCAN_PATTERN = ":*:[mied][edv]*"


@dataclass
class QueueScan:
    """What one SCAN of a prefix found: queue names, and each queue's deduplication keys."""

    names: set[str] = field(default_factory=set)
    dedup: dict[str, list[str]] = field(default_factory=dict)  # queue -> dedup ids


async def scan_queues(backend: RedisConnection) -> QueueScan:
    """Every queue of the backend's prefix and every deduplication key, in ONE walk of the
    keyspace (list_queues walks it three times, and each queue's dedup listing once more)."""
    prefix = backend.prefix + ":"
    found = QueueScan()
    pattern = glob_escape(backend.prefix) + _SCAN_PATTERN
    async for key in backend.client.scan_iter(match=pattern, count=10_000):
        _classify(key[len(prefix) :], found)
    found.names = {name for name in found.names if ":" not in name}
    return found


def _classify(rest: str, found: QueueScan) -> None:
    """Put one key (without the prefix) in its place in `found`, if it has one."""
    queue, sep, dedup_id = rest.partition(_DEDUP)
    if sep and queue and ":" not in queue:
        found.dedup.setdefault(queue, []).append(dedup_id)
        return
    for marker in _MARKERS:
        if rest.endswith(marker):
            found.names.add(rest[: -len(marker)])
            return


async def get_queue_meta(
    backend: RedisConnection, queue: str, dedup_ids: list[str] | None = None
) -> QueueMeta:
    """The queue's metadata; `dedup_ids`: its deduplication keys if known (from
    `scan_queues`), else found by a SCAN of the keyspace."""
    key = backend.queue_key(queue)
    client = backend.client
    async with client.pipeline(transaction=False) as pipe:
        pipe.hgetall(key + ":meta").get(key + ":id").get(key + ":limiter").pttl(key + ":limiter")
        meta, last_id, used, ttl = await pipe.execute()
    now = await backend.now_ms()
    limited = used is not None and int(used) >= MANUAL_LIMIT and int(ttl) > 0
    max_jobs, duration = meta.get("max"), meta.get("duration")
    if dedup_ids is None:
        dedup_ids = await _scan_dedup_ids(backend, queue)
    return {
        "paused": "paused" in meta,
        "last_id": int(last_id or 0),
        "limited_until": now + int(ttl) if limited else 0,
        "global_limiter": [int(max_jobs), int(duration)] if max_jobs and duration else None,
        "global_concurrency": int(meta["concurrency"]) if meta.get("concurrency") else None,
        "dedup": await _dedup_keys(backend, queue, dedup_ids, now),
        "schedulers": await exported_schedulers(backend, queue),
        "max_len_events": int(meta.get("opts.maxLenEvents") or 10_000),
        "groups": await group_settings(backend, queue),
    }


async def _scan_dedup_ids(backend: RedisConnection, queue: str) -> list[str]:
    """One queue's deduplication ids, by a SCAN of the whole keyspace (large steps)."""
    prefix = f"{backend.queue_key(queue)}{_DEDUP}"
    pattern = glob_escape(prefix) + "*"
    return [key[len(prefix) :] async for key in backend.client.scan_iter(pattern, count=10_000)]


async def _dedup_keys(
    backend: RedisConnection, queue: str, dedup_ids: list[str], now: int
) -> dict[str, Any]:
    """{dedup id: [owner job id, expiry ms | None]}, read in one round trip."""
    if not dedup_ids:
        return {}
    prefix = f"{backend.queue_key(queue)}{_DEDUP}"
    async with backend.client.pipeline(transaction=False) as pipe:
        for dedup_id in dedup_ids:
            pipe.get(prefix + dedup_id).pttl(prefix + dedup_id)
        replies = await pipe.execute(raise_on_error=False)
    found: dict[str, Any] = {}
    for dedup_id, owner, ttl in zip(dedup_ids, replies[::2], replies[1::2], strict=True):
        if isinstance(owner, str):  # not expired meanwhile, nor a job's key (a job "de")
            found[dedup_id] = [owner, now + ttl if ttl > 0 else None]
    return found


async def set_queue_meta(backend: RedisConnection, queue: str, meta: QueueMeta) -> None:
    key = backend.queue_key(queue)
    client = backend.client
    current = int(await client.get(key + ":id") or 0)
    if int(meta.get("last_id") or 0) > current:
        await client.set(key + ":id", int(meta["last_id"]))
    limiter = meta.get("global_limiter")
    if limiter:
        await client.hset(key + ":meta", mapping={"max": limiter[0], "duration": limiter[1]})
    concurrency = meta.get("global_concurrency")
    if concurrency:
        await client.hset(key + ":meta", "concurrency", int(concurrency))
    await client.hset(key + ":meta", "opts.maxLenEvents", int(meta.get("max_len_events") or 10_000))
    now = await backend.now_ms()
    if int(meta.get("limited_until") or 0) > now:
        await client.set(key + ":limiter", MANUAL_LIMIT, px=int(meta["limited_until"]) - now)
    for dedup_id, (owner, expiry) in (meta.get("dedup") or {}).items():
        ttl = None if expiry is None else max(1, int(expiry) - now)
        await client.set(f"{key}:de:{dedup_id}", owner, px=ttl)
    for scheduler_id, spec in (meta.get("schedulers") or {}).items():
        await _set_scheduler(backend, queue, scheduler_id, spec)
    await set_group_settings(backend, queue, meta.get("groups") or {})
    if meta.get("paused"):
        await backend.pause(queue)


async def _set_scheduler(
    backend: RedisConnection, queue: str, scheduler_id: str, spec: Mapping[str, Any]
) -> None:
    name, data, opts, _timestamp = spec["template"]
    fields: dict[str, Any] = {"name": name, "data": data, "opts": encode_opts(opts)}
    for option in ("every", "pattern", "tz", "limit", "startDate", "endDate", "offset"):
        if spec.get(option) is not None:
            fields[option] = spec[option]
    nxt = spec.get("next")  # the `repeat` score is the current run, as BullMQ reads it
    fields["ic"] = int(spec.get("iterationCount") or 0)
    key = f"{backend.queue_key(queue)}:repeat"
    await backend.client.hset(f"{key}:{scheduler_id}", mapping=fields)
    await backend.client.zadd(key, {scheduler_id: 0 if nxt is None else int(nxt)})
