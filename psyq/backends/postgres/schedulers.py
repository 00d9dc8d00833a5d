"""Job schedulers in the layout's `scheduler` table. psyq computes run times (cron), the
layout its `every` times; when a worker takes a scheduler's job, the next run is added
(as BullMQ's workers add it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import asyncpg

from psyq.backends.base import ErrorCode, JobRecord, NewJob, SchedulerEntry, raise_for_code
from psyq.backends.postgres.connection import BullmqConnection, LayoutCode
from psyq.rules import codec
from psyq.rules.schedule import next_run, upserted_run
from psyq.rules.slices import inclusive_slice

__all__ = ["SPEC_COLUMNS", "Schedulers"]

BUSY_TRIES = 50  # upserts asked while the scheduler's slots are busy (a run being taken)
BUSY_PAUSE_S = 0.02

# psyq's scheduler spec key -> the layout's column
SPEC_COLUMNS = {
    "pattern": "pattern",
    "every": "every_ms",
    "tz": "tz",
    "startDate": "start_date_ms",
    "endDate": "end_date_ms",
    "limit": "limit_count",
    "offset": "offset_ms",
}


class Schedulers(BullmqConnection):
    """Job schedulers."""

    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        """In one transaction, after psyq's lock on the scheduler (schedulers.lock): the
        first run by BullMQ's rule (`upserted_run`, as psyq's other backends choose it) from
        the scheduler as it is, then the layout's add_job_scheduler. An unchanged `every`
        keeps its pending run's time, or takes the slot after a run already taken; three
        processes upserting a new scheduler at once no longer make two runs a few ms apart
        (each was handed its own `now`)."""

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record] | None:
            async with conn.transaction():
                await conn.execute(self._q["schedulers.lock"], queue, scheduler_id)
                now = int(await conn.fetchval(self._q["queries.now"]))
                found = await conn.fetch(self._q["schedulers.one"], queue, scheduler_id)
                current = _describe(found[0]) if found else None
                current_ms = None if current is None else current["next"]
                state = None
                if current_ms is not None:
                    run_id = f"repeat:{scheduler_id}:{current_ms}"
                    rows = await conn.fetch(self._q["queries.state"], queue, run_id)
                    state = rows[0]["state"] if rows else None
                replaced = state in ("delayed", "waiting")
                millis = upserted_run(repeat, now, current, current_ms, replaced)
                if millis is None:
                    return None
                pending = _run_opts(template.opts, repeat, scheduler_id, millis, 1)
                args = (template.data, json.dumps(template.opts), json.dumps(spec))
                sql = self._q["schedulers.upsert"]
                added: list[asyncpg.Record] = await conn.fetch(
                    sql, queue, scheduler_id, millis, *args, json.dumps(pending)
                )
                return added

        spec = {"name": template.name, **repeat}
        rows = await self._upsert(queue, scheduler_id, run)
        return None if rows is None else await self.get_job(queue, rows[0]["job_id"])

    async def _upsert(
        self,
        queue: str,
        scheduler_id: str,
        run: Callable[[asyncpg.Connection], Awaitable[list[asyncpg.Record] | None]],
    ) -> list[asyncpg.Record] | None:
        """`run` on a connection. Both of the scheduler's slots busy (error -11: a worker is
        taking its run while the next is added) is a race that passes in milliseconds, and
        an unchanged upsert must not fail for it: asked again, BUSY_TRIES times at most."""
        for attempt in range(BUSY_TRIES):
            try:
                return await self._on_connection(run)
            except LayoutCode as exc:
                if exc.code != ErrorCode.SCHEDULER_SLOTS_BUSY or attempt == BUSY_TRIES - 1:
                    raise_for_code(exc.code, queue, scheduler_id, "schedule")
                    raise
            await asyncio.sleep(BUSY_PAUSE_S)
        raise AssertionError("unreachable")

    async def schedule_next_run(self, queue: str, scheduler_id: str, job_id: str) -> None:
        record = await self.get_job(queue, job_id)
        if record is not None:
            row = {"scheduler_id": scheduler_id, "id": job_id, "opts": json.dumps(record.opts)}
            await self._after_take(queue, [row])

    async def _after_take(self, queue: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Add the next run of each scheduler whose job was just taken."""
        for row in rows:
            scheduler_id = row["scheduler_id"]
            if scheduler_id is None:
                continue
            entry = await self.get_job_scheduler(queue, scheduler_id)
            prev = str(row["id"]).rsplit(":", 1)[-1]
            if entry is None or not prev.isdigit():
                continue
            opts = json.loads(row["opts"])
            repeat = opts.get("repeat")
            count = repeat.get("count") if isinstance(repeat, Mapping) else None
            if not isinstance(count, int):
                count = entry["iterationCount"]
            millis = next_run(entry, int(prev), count, await self.now_ms())
            if millis is None:
                await self._rows("schedulers.done", queue, scheduler_id)
                continue
            spec = repeat if isinstance(repeat, Mapping) else {}
            pending = _run_opts(opts, spec, scheduler_id, millis, count + 1)
            await self._rows(
                "schedulers.next", queue, scheduler_id, millis, json.dumps(pending), row["id"]
            )

    async def get_job_scheduler(self, queue: str, scheduler_id: str) -> SchedulerEntry | None:
        rows = await self._rows("schedulers.one", queue, scheduler_id)
        return _describe(rows[0]) if rows else None

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[SchedulerEntry]:
        entries = [_describe(row) for row in await self._rows("schedulers.all", queue)]
        entries = entries if asc else entries[::-1]
        return inclusive_slice(entries, start, end)

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        """The layout removes the pending job while it is delayed; one already waiting (an
        `every` scheduler's first run) is removed here too, as psyq's other backends do."""
        entry = await self.get_job_scheduler(queue, scheduler_id)
        # the layout's code: 0 removed, 1 no such scheduler
        removed: bool = await self._value("schedulers.remove", queue, scheduler_id) == 0
        if removed and entry is not None and entry["next"] is not None:
            pending = f"repeat:{scheduler_id}:{entry['next']}"
            await self._rows("schedulers.drop_waiting", queue, pending)
        return removed


def _run_opts(
    opts: Mapping[str, Any], repeat: Mapping[str, Any], scheduler_id: str, millis: int, count: int
) -> dict[str, Any]:
    """A run's options as BullMQ's workers read them to add the following run (psyq's Redis
    backend writes the same): the spec under `repeat` with the run's number `count` and
    without `immediately` (it shapes the first run only: a run carrying it makes Node's
    worker add the next one at once), `prevMillis` and `repeatJobKey`. The layout adds
    `delay` and `jobId`."""
    spec = {key: value for key, value in repeat.items() if key != "immediately"}
    run = {key: value for key, value in opts.items() if key not in ("delay", "jobId")}
    run.update(repeat={**spec, "count": count}, prevMillis=millis, repeatJobKey=scheduler_id)
    return run


def _compact(text: str | None) -> str:
    """The template's data as psyq's other stores hold it, compact JSON text (jsonb's text
    puts a space after each `:` and `,`)."""
    return "null" if text is None else codec.dumps(json.loads(text), "template data", None)


def _describe(row: asyncpg.Record) -> SchedulerEntry:
    """A scheduler row as `get_job_scheduler` returns it (the engine's shape)."""
    entry: dict[str, Any] = {"key": row["scheduler_id"], "name": row["name"] or ""}
    for name, column in SPEC_COLUMNS.items():
        if row[column] is not None:
            entry[name] = row[column]
    opts = json.loads(row["template_opts"] or "{}")
    entry["template"] = {"data": _compact(row["template_data"]), "opts": opts}
    entry["iterationCount"] = int(row["iteration_count"] or 0)
    entry["next"] = row["next_run_ms"]
    return cast(SchedulerEntry, entry)  # the spec's keys are set by name
