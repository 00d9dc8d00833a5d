"""Job schedulers: BullMQ's `repeat` sorted set and `repeat:<id>` hashes; the next run is
computed here (cron arithmetic does not run in Lua) when the current run becomes active."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from psyq.backends.base import (
    JobRecord,
    NewJob,
)
from psyq.backends.redis.connection import RedisConnection
from psyq.backends.redis.jobs import (
    add_meta,
    decode_opts,
    encode_opts,
)
from psyq.core.schedule import first_run, next_run


class Schedulers(RedisConnection):
    """Job schedulers."""

    async def upsert_job_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: NewJob
    ) -> JobRecord | None:
        millis = first_run(repeat, await self.now_ms())
        fields = {**repeat, "name": template.name, "data": template.data}
        fields["opts"] = encode_opts(template.opts)
        job_id = await self._add_run(queue, scheduler_id, "upsert", "", millis, fields, template)
        return await self.get_job(queue, job_id) if job_id else None

    async def _add_run(
        self,
        queue: str,
        scheduler_id: str,
        mode: str,
        prev: str,
        millis: int | None,
        fields: Mapping[str, Any],
        template: NewJob,
    ) -> str:
        opts = {**template.opts, "repeatJobKey": scheduler_id}
        new = NewJob(template.name, template.data, opts)
        args = (
            scheduler_id,
            mode,
            prev,
            "" if millis is None else millis,
            json.dumps(fields),
            add_meta(new),
            template.data,
            encode_opts(opts),
        )
        return str(await self._run("addJobScheduler", queue, *args))

    async def _schedule_next(self, queue: str, records: list[JobRecord]) -> None:
        """A scheduler's pending job became active: add its next run (BullMQ's workers do
        this too: the cron arithmetic lives outside Lua)."""
        for record in records:
            scheduler_id = record.opts.get("repeatJobKey")
            if scheduler_id is None:
                continue
            entry = await self.get_job_scheduler(queue, scheduler_id)
            prev = record.id.rsplit(":", 1)[-1]
            if entry is None or str(entry["next"]) != prev:
                continue
            millis = next_run(entry, int(prev), entry["iterationCount"], await self.now_ms())
            template = NewJob(entry["name"], entry["template"]["data"], entry["template"]["opts"])
            await self._add_run(queue, scheduler_id, "next", prev, millis, {}, template)

    async def get_job_scheduler(self, queue: str, scheduler_id: str) -> dict[str, Any] | None:
        fields = await self.client.hgetall(f"{self.queue_key(queue)}:repeat:{scheduler_id}")
        return _describe_scheduler(scheduler_id, fields) if fields else None

    async def get_job_schedulers(
        self, queue: str, start: int, end: int, asc: bool
    ) -> list[dict[str, Any]]:
        ids = await self.client.zrange(self.queue_key(queue) + ":repeat", 0, -1)
        ids = ids if asc else ids[::-1]
        stop = None if end == -1 else end + 1
        found = [await self.get_job_scheduler(queue, i) for i in ids[start:stop]]
        return [entry for entry in found if entry is not None]

    async def remove_job_scheduler(self, queue: str, scheduler_id: str) -> bool:
        return bool(await self._run("removeJobScheduler", queue, scheduler_id))


_SCHEDULER_INTS = ("every", "limit", "startDate", "endDate")


def _describe_scheduler(scheduler_id: str, fields: Mapping[str, str]) -> dict[str, Any]:
    """A scheduler hash as `get_job_scheduler` returns it (the native engine's shape)."""
    entry: dict[str, Any] = {"key": scheduler_id, "name": fields.get("name", "")}
    for name in ("pattern", "tz"):
        if name in fields:
            entry[name] = fields[name]
    for name in _SCHEDULER_INTS:
        if fields.get(name):
            entry[name] = int(float(fields[name]))
    if "immediately" in fields:
        entry["immediately"] = fields["immediately"] == "true"
    entry["template"] = {
        "data": fields.get("data", "null"),
        "opts": decode_opts(fields.get("opts")),
    }
    entry["iterationCount"] = int(fields.get("ic") or 0)
    entry["next"] = int(fields["next"]) if fields.get("next") else None
    return entry
