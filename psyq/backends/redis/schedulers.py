"""Job schedulers in BullMQ's layout: the `repeat` sorted set scores each scheduler by the
millis of its current run, `repeat:<id>` hashes hold the spec and template, and each run is
a job `repeat:<id>:<millis>` whose options carry the spec under `repeat` (with `count`, the
run's number) and `prevMillis`: BullMQ's workers read those to add the following run. The
next run is computed here (cron arithmetic does not run in Lua) when the current run becomes
active, for a scheduler made by psyq or by Node BullMQ alike."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, cast

from psyq.backends.base import (
    JobRecord,
    NewJob,
    SchedulerEntry,
)
from psyq.backends.redis.connection import CONNECTION_ERRORS, RedisConnection, log
from psyq.backends.redis.jobs import (
    add_meta,
    decode_opts,
    encode_opts,
)
from psyq.errors import PsyqError
from psyq.rules.schedule import next_run, upserted_run
from psyq.rules.slices import inclusive_slice

# The spec fields a scheduler hash and a run's `opts.repeat` hold (`immediately` only shapes
# the first run, so BullMQ keeps it in neither).
_SPEC_FIELDS = ("every", "pattern", "tz", "limit", "startDate", "endDate", "offset")
_SCHEDULER_INTS = ("every", "limit", "startDate", "endDate", "offset")
_STALE = "stale"  # addJobScheduler's answer when the scheduler changed since it was read
_UPSERT_TRIES = 20


class Schedulers(RedisConnection):
    """Job schedulers."""

    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        for _ in range(_UPSERT_TRIES):
            job_id = await self._upsert_once(queue, scheduler_id, repeat, template)
            if job_id != _STALE:
                return await self.get_job(queue, job_id) if job_id else None
        raise PsyqError(
            f"cannot upsert scheduler {scheduler_id!r} of {queue!r}: its current run kept "
            f"changing ({_UPSERT_TRIES} tries)"
        )

    async def _upsert_once(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> str:
        """One try: the first run is chosen from the scheduler as read here (BullMQ's rule,
        `upserted_run`), and the script adds it only if the scheduler's current run is as
        read (else it returns _STALE)."""
        now = await self.now_ms()
        fields, current = await self._scheduler_fields(queue, scheduler_id)
        replaced = current is not None and await self._pending(queue, scheduler_id, current)
        spec_now = _describe_scheduler(scheduler_id, fields, None) if fields else None
        millis = upserted_run(repeat, now, spec_now, current, replaced)
        spec = {name: repeat[name] for name in _SPEC_FIELDS if name in repeat}
        if "every" in spec and millis is not None:
            spec["offset"] = millis % spec["every"]  # BullMQ keeps runs in this phase
        fields = {**spec, "name": template.name}
        if template.data != "{}":
            fields["data"] = template.data
        if template.opts:
            fields["opts"] = encode_opts(template.opts)
        run = _Run(scheduler_id, spec, template, 1)
        seen = "" if current is None else f"{current}:{int(replaced)}"
        return await self._add_run(queue, run, "upsert", seen, millis, fields, now)

    async def _pending(self, queue: str, scheduler_id: str, millis: int) -> bool:
        """Whether the scheduler's run at `millis` is still pending (not taken)."""
        state = await self.get_state(queue, f"repeat:{scheduler_id}:{millis}")
        return state in ("delayed", "waiting", "prioritized")

    async def _add_run(
        self,
        queue: str,
        run: _Run,
        mode: str,
        prev: str,
        millis: int | None,
        fields: Mapping[str, Any],
        now: int,
    ) -> str:
        opts = run.job_opts(millis, now) if millis is not None else {}
        new = NewJob(run.template.name, run.template.data, opts)
        args = (
            run.scheduler_id,
            mode,
            prev,
            "" if millis is None else millis,
            json.dumps(fields),
            add_meta(new),
            run.template.data,
            encode_opts(opts),
        )
        return str(await self._run("addJobScheduler", queue, *args))

    async def _schedule_next(self, queue: str, records: list[JobRecord]) -> None:
        """A scheduler's current run became active: add its next run (BullMQ's workers do
        this too, so either side's workers continue either side's schedulers). A next run
        that fails on a lost connection is retried in the background until it lands (else
        the scheduler would stop for good: issue 39); one that cannot be made (a pattern
        psyq cannot read) is logged to `psyq.redis`, as BullMQ's worker emits an error.
        Either way the fetched jobs still run."""
        for record in records:
            run = _run_of(record)
            if run is None:
                continue
            scheduler_id, prev = run
            try:
                await self._next_run(queue, scheduler_id, record, prev)
            except CONNECTION_ERRORS:
                what = f"the next run of scheduler {scheduler_id!r} of {queue!r}"
                retry = functools.partial(self._next_run, queue, scheduler_id, record, prev)
                self._keep_trying(what, retry)
            except Exception:  # the fetched jobs are active: they must reach the worker
                log.exception("no next run for scheduler %r of %r", scheduler_id, queue)

    async def _next_run(self, queue: str, scheduler_id: str, record: JobRecord, prev: int) -> None:
        """Add the run after `record` (the run at `prev`) unless the scheduler was removed
        or replaced meanwhile, or that run is no longer its current one (the script checks
        again: adding a next run twice adds it once)."""
        fields, current = await self._scheduler_fields(queue, scheduler_id)
        if fields and current == prev:
            await self._add_next(queue, scheduler_id, record, fields, prev)

    async def repair_schedulers(self, queue: str) -> None:
        """Add the next run of every scheduler of `queue` whose current run was taken but
        has no next run: one whose retry never landed (its worker stopped first). Each
        worker start does this, so restarting workers restarts such a scheduler; a next run
        that exists already is not added again (the script checks the current run)."""
        key = self.queue_key(queue) + ":repeat"
        taken = []
        for scheduler_id, score in await self.client.zrange(key, 0, -1, withscores=True):
            record = await self.get_job(queue, f"repeat:{scheduler_id}:{int(score)}")
            if record is not None and record.processed_on is not None:
                taken.append(record)
        await self._schedule_next(queue, taken)

    async def schedule_next_run(self, queue: str, scheduler_id: str, job_id: str) -> None:
        record = await self.get_job(queue, job_id)
        if record is not None:
            await self._schedule_next(queue, [record])

    async def _add_next(
        self,
        queue: str,
        scheduler_id: str,
        record: JobRecord,
        fields: Mapping[str, str],
        prev: int,
    ) -> None:
        entry = _describe_scheduler(scheduler_id, fields, None)
        repeat = record.opts.get("repeat")
        count = repeat.get("count") if isinstance(repeat, Mapping) else None
        if not isinstance(count, int):
            count = entry["iterationCount"]
        now = await self.now_ms()
        millis = next_run(entry, prev, count, now)
        if millis is None:
            return  # done: like BullMQ, the scheduler stays scored by its last run
        fields_of: Mapping[str, Any] = entry  # the spec's keys, by name
        spec = {name: fields_of[name] for name in _SPEC_FIELDS if name in fields_of}
        # BullMQ 5's repeatable jobs (Queue.add with `repeat`) keep their data and options
        # in their runs, not in the scheduler's hash: the next run takes the current one's.
        opts = entry["template"]["opts"] if "opts" in fields else _template_opts(record.opts)
        template = NewJob(entry["name"], fields.get("data") or record.data, opts)
        run = _Run(scheduler_id, spec, template, count + 1)
        await self._add_run(queue, run, "next", str(prev), millis, {}, now)

    async def _scheduler_fields(
        self, queue: str, scheduler_id: str
    ) -> tuple[dict[str, str], int | None]:
        """(the scheduler hash, the millis of its current run: None when not listed)."""
        key = self.queue_key(queue)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(f"{key}:repeat:{scheduler_id}")
            pipe.zscore(f"{key}:repeat", scheduler_id)
            fields, score = await pipe.execute()
        return fields, None if score is None else int(score)

    async def get_job_scheduler(self, queue: str, scheduler_id: str) -> SchedulerEntry | None:
        fields, current = await self._scheduler_fields(queue, scheduler_id)
        if not fields:
            return None
        pending = None
        if current:  # the current run is the next one until a worker has taken it
            job_key = f"{self.queue_key(queue)}:repeat:{scheduler_id}:{current}"
            taken = await self.client.hmget(job_key, ["timestamp", "processedOn"])
            pending = current if taken[0] is not None and taken[1] is None else None
        return _describe_scheduler(scheduler_id, fields, pending)

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[SchedulerEntry]:
        ids = await self.client.zrange(self.queue_key(queue) + ":repeat", 0, -1)
        ids = ids if asc else ids[::-1]
        found = [await self.get_job_scheduler(queue, i) for i in inclusive_slice(ids, start, end)]
        return [entry for entry in found if entry is not None]

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        return bool(await self._run("removeJobScheduler", queue, scheduler_id))


def _run_of(record: JobRecord) -> tuple[str, int] | None:
    """(scheduler id, millis) when `record` is a scheduler's run, `repeat:<id>:<millis>`
    (by BullMQ's job scheduler, by psyq's, or by BullMQ 5's Queue.add with `repeat`, whose
    runs name their scheduler only in the `rjk` hash field)."""
    if not record.id.startswith("repeat:"):
        return None
    scheduler_id, _, millis = record.id.removeprefix("repeat:").rpartition(":")
    named = record.opts.get("repeatJobKey", scheduler_id)
    if not scheduler_id or not millis.isdigit() or named != scheduler_id:
        return None
    return scheduler_id, int(millis)


_RUN_OPTS = frozenset({"repeat", "jobId", "delay", "timestamp", "prevMillis", "repeatJobKey"})


def _template_opts(opts: Mapping[str, Any]) -> dict[str, Any]:
    """A run's options without those of the run itself."""
    return {name: value for name, value in opts.items() if name not in _RUN_OPTS}


class _Run:
    """One run of a scheduler to add: its job options as BullMQ's worker reads them."""

    __slots__ = ("count", "scheduler_id", "spec", "template")

    def __init__(
        self, scheduler_id: str, spec: Mapping[str, Any], template: NewJob, count: int
    ) -> None:
        self.scheduler_id = scheduler_id
        self.spec = spec
        self.template = template
        self.count = count

    def job_opts(self, millis: int, now: int) -> dict[str, Any]:
        return {
            **self.template.opts,
            "repeat": {**self.spec, "count": self.count},
            "jobId": f"repeat:{self.scheduler_id}:{millis}",
            "delay": max(0, millis - now),
            "timestamp": now,
            "prevMillis": millis,
            "repeatJobKey": self.scheduler_id,
        }


def _describe_scheduler(
    scheduler_id: str, fields: Mapping[str, str], pending: int | None
) -> SchedulerEntry:
    """A scheduler hash as `get_job_scheduler` returns it (the engine's shape);
    `pending`: the millis of its run not yet taken by a worker (None: none)."""
    entry: dict[str, Any] = {"key": scheduler_id, "name": fields.get("name", "")}
    for name in ("pattern", "tz"):
        if name in fields:
            entry[name] = fields[name]
    for name in _SCHEDULER_INTS:
        if fields.get(name):
            entry[name] = int(float(fields[name]))
    entry["template"] = {
        "data": fields.get("data", "{}"),  # BullMQ leaves out `{}`
        "opts": decode_opts(fields.get("opts")),
    }
    entry["iterationCount"] = int(fields.get("ic") or 0)
    entry["next"] = pending
    return cast(SchedulerEntry, entry)  # the spec's keys are set by name
