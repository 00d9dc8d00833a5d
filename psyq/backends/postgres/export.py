"""Export / import of a queue (what `psyq migrate` and the Spark pipeline use); the contract
is in `psyq.backends.base` (`ExportPage`, `export_jobs`, `import_jobs`, queue meta).

- Export pages follow the line order: waiting as taken, prioritized by priority, delayed by
  due time, active, waiting-children, completed and failed by finish (each by sequence
  after its key). The cursor is the position of the last row, `pg1:<line>:<key>:<seq>:<id>`:
  a page resumes right after it, however the queue changed meanwhile.
- Import writes a page in one transaction, idempotently by id: a job already there with the
  same name, data and timestamp is skipped; a different one fails the page (nothing written)
  unless `overwrite`. Jobs keep their state (active ones arrive waiting), line order, due
  time and their children's links; no events (workers are woken by a NOTIFY); the auto-id
  counter moves past every numeric id imported.
- Queue meta is the neutral shape every backend shares (see `base.get_queue_meta`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import asyncpg

from psyq.backends.base import ExportPage, JobRecord
from psyq.backends.postgres.records import to_record
from psyq.backends.postgres.tx import Tx, json_text, queue_of
from psyq.errors import PsyqError

__all__ = ["export_page", "import_jobs", "queue_meta", "set_queue_meta"]

# The lines of a queue in export order: (state, statement that pages it).
_LINES = (
    ("waiting", "export_jobs.page_by_seq"),
    ("prioritized", "export_jobs.page_prioritized"),
    ("delayed", "export_jobs.page_delayed"),
    ("active", "export_jobs.page_by_seq"),
    ("waiting-children", "export_jobs.page_by_seq"),
    ("completed", "export_jobs.page_by_seq"),
    ("failed", "export_jobs.page_by_seq"),
)
_LOWEST = -(2**63)  # below every key and sequence: the start of a line
_CURSOR = "pg1"
_STATES = {"waiting", "paused", "prioritized", "delayed", "active", "waiting-children"}
_STATES |= {"completed", "failed"}
_LINK_KINDS = ("processed", "failed", "ignored")
_EMPTY = {"processed": "null", "failed": "", "ignored": ""}  # a link stored without value
_BIGINT_DIGITS = 18  # numeric ids that surely fit the bigint id counter


# ---------------------------------------------------------------------- export
Position = tuple[int, int, int, str]  # line, key, sequence, id


def _encode(position: Position) -> str:
    line, key, seq, job_id = position
    return f"{_CURSOR}:{line}:{key}:{seq}:{job_id}"


def _decode(cursor: str | None) -> Position:
    if cursor is None:
        return 0, _LOWEST, _LOWEST, ""
    parts = cursor.split(":", 4)
    try:
        if len(parts) != 5 or parts[0] != _CURSOR:
            raise ValueError(cursor)
        line, key, seq = int(parts[1]), int(parts[2]), int(parts[3])
        if not 0 <= line < len(_LINES):
            raise ValueError(cursor)
    except ValueError:
        raise PsyqError(f"unknown export cursor {cursor!r}: start again with cursor=None") from None
    return line, key, seq, parts[4]


def _key_of(state: str, row: asyncpg.Record) -> int:
    if state == "prioritized":
        return int(row["priority"])
    if state == "delayed":
        return int(row["due"] or 0)
    return 0


async def export_page(tx: Tx, qkey: str, cursor: str | None, limit: int) -> ExportPage:
    line, key, seq, after = _decode(cursor)
    rows: list[asyncpg.Record] = []
    last: Position | None = None
    while line < len(_LINES) and len(rows) < limit:
        state, statement = _LINES[line]
        want = limit - len(rows)
        if statement == "export_jobs.page_by_seq":
            found = await tx.fetch(statement, qkey, state, seq, after, want)
        else:
            found = await tx.fetch(statement, qkey, key, seq, after, want)
        rows += found
        if found:
            tail = found[-1]
            last = (line, _key_of(state, tail), int(tail["seq"]), str(tail["id"]))
        if len(found) < want:
            line, key, seq, after = line + 1, _LOWEST, _LOWEST, ""
    page = ExportPage([], {}, None)
    if not rows:
        return page
    page.jobs = [to_record(row) for row in rows]
    for record in page.jobs:
        record.lock_token = None
    ids = [record.id for record in page.jobs]
    for row in await tx.fetch("export_jobs.logs", qkey, ids):
        page.logs.setdefault(row["job_id"], []).append(row["row"])
    page.due = {row["id"]: int(row["due"]) for row in rows if row["state"] == "delayed"}
    for row in await tx.fetch("export_jobs.links", qkey, ids):
        links = page.deps.setdefault(
            row["parent_id"], {"pending": [], "processed": {}, "failed": {}, "ignored": {}}
        )
        if row["status"] == "pending":
            links["pending"].append(row["child_key"])
        elif row["status"] in _LINK_KINDS:
            links[row["status"]][row["child_key"]] = row["value"] or _EMPTY[row["status"]]
    if len(rows) == limit and last is not None:
        page.next_cursor = _encode(last)
    return page


# ---------------------------------------------------------------------- import
Arriving = tuple[JobRecord, str]  # a job to write and the state it arrives in
Transact = Callable[[Callable[[Tx], Awaitable[int]]], Awaitable[int]]


class _IdTaken(Exception):
    """A page copied without looking first found one of its ids taken (a rerun, or jobs
    imported before): its transaction is rolled back and the page imported by looking."""


async def import_jobs(transact: Transact, qkey: str, page: ExportPage, overwrite: bool) -> int:
    """Import a page in one transaction (`transact` runs it, retried whole). A page of
    fresh ids into a queue without logs or links (the usual migration: ids never seen, a
    queue filling up) is copied straight in; the table's primary key checks its ids as the
    rows go in. Only when it finds one taken is the page imported again, looking first (each
    id probed, old logs and links of the new ones dropped): so a first run pays for no
    lookup, and a rerun after a crash pays twice only for the pages it had written."""
    try:
        return await transact(lambda tx: _import_page(tx, qkey, page, overwrite, look=False))
    except _IdTaken:
        return await transact(lambda tx: _import_page(tx, qkey, page, overwrite, look=True))


async def _import_page(tx: Tx, qkey: str, page: ExportPage, overwrite: bool, look: bool) -> int:
    """The page in a few statements whatever its size: the queue row, then (`look`, or
    when the queue has logs or links whose stale rows a new job must not inherit) the ids
    already taken, dropping the old logs and links of the others, every new job in one COPY
    (or one upsert with `overwrite`), then their logs and children's links. Without `look`
    a taken id raises `_IdTaken` (the caller looks). Written jobs take new sequence numbers
    in page order (a COPY leaves them to the column's default). The transaction commits
    with synchronous_commit off: see docs/migrate.md ("Durability")."""
    _check_states(page.jobs)
    linked = await tx.fetchval("export_jobs.import_begin", qkey, queue_of(qkey), _top_id(page))
    look = look or linked  # stale logs or links may lie under a new id: look at the ids first
    if overwrite:
        written = await _all_jobs(tx, qkey, page)
    elif look:
        written = await _new_jobs(tx, qkey, page)
    else:
        written = [(job, _arriving_state(job)) for job in page.jobs]
    if written:
        if overwrite:  # some may be there: replaced in place
            await _upsert(tx, qkey, written, page.due)
        else:  # none is there (checked, or the primary key refuses the page): COPY
            await _copy(tx, qkey, written, page.due, looked=look)
        ids = [job.id for job, _ in written]
        await _add_logs(tx, qkey, ids, page.logs)
        await _add_links(tx, qkey, ids, page.deps)
    if any(state in ("waiting", "prioritized") for _, state in written):
        tx.wake(qkey)
    return len(written)


async def _copy(
    tx: Tx, qkey: str, jobs: list[Arriving], due: Mapping[str, int], looked: bool
) -> None:
    """COPY the jobs in. A taken id raises `_IdTaken` unless the ids were `looked` at
    first: then it is one id twice in the page, and the page fails as it is."""
    columns, rows = _copy_rows(qkey, jobs, due)
    try:
        await tx.conn.copy_records_to_table("jobs", records=rows, columns=columns)
    except asyncpg.UniqueViolationError as exc:
        if looked or exc.constraint_name != "jobs_pkey":
            raise
        raise _IdTaken from None


def _top_id(page: ExportPage) -> int:
    """The largest numeric id of the page (0: none), which the auto-id counter must pass:
    ids of ASCII digits that surely fit a bigint (filtered in C, a Python step only for
    the length)."""
    digits = filter(str.isdigit, filter(str.isascii, [job.id for job in page.jobs]))
    return max(map(int, [d for d in digits if len(d) <= _BIGINT_DIGITS]), default=0)


def _check_states(jobs: Sequence[JobRecord]) -> None:
    for job in jobs:
        if (job.state or "waiting") not in _STATES:
            raise PsyqError(f"cannot import job {job.id!r}: unknown state {job.state!r}")


async def _all_jobs(tx: Tx, qkey: str, page: ExportPage) -> list[Arriving]:
    """With overwrite: every job of the page, its old logs and links dropped."""
    ids = [job.id for job in page.jobs]
    await tx.execute("export_jobs.drop_logs_many", qkey, ids)
    await tx.execute("export_jobs.drop_links_many", qkey, ids)
    return [(job, _arriving_state(job)) for job in page.jobs]


async def _new_jobs(tx: Tx, qkey: str, page: ExportPage) -> list[Arriving]:
    """The page's jobs whose ids are free, in page order (their stale logs and links
    dropped, in the same statement); refuses (before anything is written) a different job
    under a taken id."""
    rows = await tx.fetch("export_jobs.existing_drop_new", qkey, [job.id for job in page.jobs])
    existing = {row["id"]: row for row in rows}
    written: list[Arriving] = []
    for job in page.jobs:
        old = existing.get(job.id)
        if old is None:
            written.append((job, _arriving_state(job)))
        elif (old["name"], old["data"], old["timestamp"]) != (job.name, job.data, job.timestamp):
            raise PsyqError(
                f"cannot import job {job.id!r} into {queue_of(qkey)!r}: a different job holds "
                "that id there (import with overwrite to replace it)"
            )
    return written


def _arriving_state(job: JobRecord) -> str:
    """The state a job arrives in: active ones (their worker is gone) and paused ones wait."""
    state = job.state or "waiting"
    if state in ("active", "paused"):
        state = "waiting"
    if state == "waiting" and job.priority > 0:
        state = "prioritized"
    return state


# The columns an import writes but `seq`, in `upsert_many`'s order (which takes `seq` last).
_COPIED = (
    "qkey", "id", "name", "data", "opts", "timestamp", "delay", "priority", "progress",
    "attempts_made", "attempts_started", "stalled_counter", "processed_on", "finished_on",
    "returnvalue", "failed_reason", "stacktrace", "parent_key", "processed_by", "state", "due",
)  # fmt: skip


# What a COPY of jobs that never ran and carry no options needs: the table's defaults fill
# the other columns with what `_row` would send for them.
_PLAIN = ("qkey", "id", "name", "data", "timestamp", "state")


def _copy_rows(
    qkey: str, jobs: list[Arriving], due: Mapping[str, int]
) -> tuple[Sequence[str], list[tuple[Any, ...]]]:
    """The columns of a COPY and its rows: `_PLAIN`'s when every job is plain (fewer values
    to encode, send and parse), else `_COPIED`'s. Neither has `seq`: its default, a new
    number per row in row order, is what the import gives."""
    if all(_is_plain(job, state) for job, state in jobs):
        return _PLAIN, [
            (qkey, job.id, job.name, job.data, job.timestamp, state) for job, state in jobs
        ]
    return _COPIED, _rows(qkey, jobs, due)


async def _upsert(tx: Tx, qkey: str, jobs: list[Arriving], due: Mapping[str, int]) -> None:
    """Every job of `jobs` written over whatever holds its id, with new sequence numbers."""
    columns = list(zip(*_rows(qkey, jobs, due), strict=True))[1:]
    seqs = [row[0] for row in await tx.fetch("add_jobs.next_seqs", len(jobs))]
    await tx.execute("export_jobs.upsert_many", qkey, *columns, seqs)


def _is_plain(job: JobRecord, state: str) -> bool:
    """Whether every column of the job's row but `_PLAIN`'s holds the table's default."""
    return (
        not job.opts and not job.delay and not job.priority
        and type(job.progress) is int and job.progress == 0
        and not job.attempts_made and not job.attempts_started and not job.stalled_counter
        and job.processed_on is None and job.finished_on is None and job.returnvalue is None
        and job.failed_reason is None and not job.stacktrace and job.parent_key is None
        and job.processed_by is None and state != "delayed"
    )  # fmt: skip


def _rows(qkey: str, jobs: list[Arriving], due: Mapping[str, int]) -> list[tuple[Any, ...]]:
    """One row of `_COPIED` values per job."""
    return [_row(qkey, job, state, due.get(job.id)) for job, state in jobs]


def _row(qkey: str, job: JobRecord, state: str, due: int | None) -> tuple[Any, ...]:
    """Runs once per imported job: JSON encoding only where a value is not the usual empty
    one (no options, progress a number, no stack trace)."""
    opts, progress, stack = job.opts, job.progress, job.stacktrace
    return (
        qkey, job.id, job.name, job.data, json_text(opts) if opts else "{}", job.timestamp,
        job.delay, job.priority,
        str(progress) if type(progress) is int else json_text(progress),
        job.attempts_made, job.attempts_started, job.stalled_counter, job.processed_on,
        job.finished_on, job.returnvalue, job.failed_reason,
        json_text(list(stack)) if stack else "[]", job.parent_key, job.processed_by, state,
        _due(job, state, due),
    )  # fmt: skip


def _due(job: JobRecord, state: str, due: int | None) -> int | None:
    if state != "delayed":
        return None
    return job.timestamp + job.delay if due is None else due


async def _add_logs(tx: Tx, qkey: str, ids: list[str], logs: Mapping[str, Sequence[str]]) -> None:
    """The jobs' logs, those of the page (their old ones were dropped)."""
    logged = [job_id for job_id in ids if job_id in logs] if logs else []
    owners = [job_id for job_id in logged for _ in logs[job_id]]
    if owners:
        rows = [row for job_id in logged for row in logs[job_id]]
        await tx.execute("export_jobs.add_logs_many", qkey, owners, rows)


async def _add_links(
    tx: Tx, qkey: str, ids: list[str], deps: Mapping[str, Mapping[str, Any]]
) -> None:
    """The jobs' children links, those of the page (child keys kept as they are; the old
    ones were dropped)."""
    linked = [job_id for job_id in ids if job_id in deps] if deps else []
    links = [link for job_id in linked for link in _links_of(job_id, deps[job_id])]
    if links:
        parents, keys, statuses, values = (list(column) for column in zip(*links, strict=True))
        await tx.execute("export_jobs.add_links_many", qkey, parents, keys, statuses, values)


def _links_of(
    job_id: str, links: Mapping[str, Any] | None
) -> list[tuple[str, str, str, str | None]]:
    """(parent id, child key, status, value) of each of a parent's links."""
    if not links:
        return []
    found: list[tuple[str, str, str, str | None]] = [
        (job_id, str(key), "pending", None) for key in links.get("pending") or ()
    ]
    for kind in _LINK_KINDS:
        for key, value in (links.get(kind) or {}).items():
            found.append((job_id, str(key), kind, None if value is None else str(value)))
    return found


# ---------------------------------------------------------------------- queue meta
async def queue_meta(tx: Tx, qkey: str) -> dict[str, Any]:
    queue = await tx.fetchrow("common.queue", qkey)
    now = await tx.now()
    schedulers = await tx.fetch("schedulers.all", qkey)
    dedup = await tx.fetch("export_jobs.dedup_keys", qkey)
    limiter = None
    if queue is not None and queue["global_max"] is not None and queue["global_duration"]:
        limiter = [int(queue["global_max"]), int(queue["global_duration"])]
    limited = 0 if queue is None else int(queue["limited_until"])
    return {
        "paused": bool(queue is not None and queue["paused"]),
        "last_id": 0 if queue is None else int(queue["last_id"]),
        "limited_until": limited if limited > now else 0,
        "global_limiter": limiter,
        "global_concurrency": None if queue is None else queue["global_concurrency"],
        "dedup": {row["dedup_id"]: [row["job_id"], row["expires"]] for row in dedup},
        "schedulers": {row["id"]: _scheduler(row) for row in schedulers},
        "max_len_events": 10_000 if queue is None else int(queue["max_len_events"]),
    }


def _scheduler(row: asyncpg.Record) -> dict[str, Any]:
    """The neutral shape: the spec as given to upsert_job_scheduler, the template, the
    iteration count, the next run and the pending job."""
    shown: dict[str, Any] = json.loads(row["spec"])
    shown["template"] = [
        row["template_name"],
        row["template_data"],
        json.loads(row["template_opts"]),
        None,
    ]
    shown["iterationCount"] = row["iteration_count"]
    shown["next"] = row["next_ms"]
    shown["pending"] = row["pending"]
    return shown


_NOT_SPEC = ("template", "iterationCount", "next", "pending", "key", "name")


async def set_queue_meta(tx: Tx, qkey: str, meta: Mapping[str, Any]) -> None:
    limiter = meta.get("global_limiter")
    concurrency = meta.get("global_concurrency")
    await tx.execute(
        "export_jobs.set_meta",
        qkey,
        queue_of(qkey),
        bool(meta.get("paused", False)),
        int(meta.get("last_id") or 0),
        int(meta.get("max_len_events") or 10_000),
        None if concurrency is None else int(concurrency),
        int(limiter[0]) if limiter else None,
        int(limiter[1]) if limiter else None,
        int(meta.get("limited_until") or 0),
    )
    for scheduler_id, entry in (meta.get("schedulers") or {}).items():
        name, data, opts, _timestamp = entry["template"]
        spec = {k: v for k, v in entry.items() if k not in _NOT_SPEC}
        await tx.execute(
            "export_jobs.scheduler_row",
            qkey,
            scheduler_id,
            json_text(spec),
            name,
            data,
            json_text(opts),
            int(entry.get("iterationCount") or 0),
            entry.get("next"),
            entry.get("pending"),
        )
    for dedup_id, (job_id, expires) in (meta.get("dedup") or {}).items():
        await tx.execute("add_jobs.dedup_set", qkey, dedup_id, job_id, expires)
    tx.wake(qkey)  # resumed or limits changed: workers look again
