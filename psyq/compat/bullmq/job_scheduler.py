"""`JobScheduler`: the `bullmq` package's job schedulers (repeatable job factories),
mapped onto psyq's core schedulers."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from psyq.compat.bullmq.errors import BadCronError
from psyq.compat.bullmq.job import Job, decode_opts
from psyq.errors import InvalidOptionsError
from psyq.rules.schedule import first_run, normalize_repeat

__all__ = ["JobScheduler", "default_repeat_strategy"]

# Repeat options psyq's schedulers take; `bullmq`'s others (`count`, `key`, `offset`,
# `utc`, `jobId`, `prevMillis`) steer its own bookkeeping and are read here or dropped.
_REPEAT_KEYS = frozenset({"every", "pattern", "tz", "limit", "immediately", "startDate", "endDate"})
_NOT_IN_TEMPLATE = frozenset(
    {"jobId", "delay", "deduplication", "parent", "repeat", "repeatJobKey"}
)


def _now_ms() -> int:
    return round(time.time() * 1000)


def _repeat_spec(repeat_opts: Mapping[str, Any]) -> dict[str, Any]:
    """The core spec of `bullmq` repeat options, validated (ValueError when they clash; a
    cron pattern that does not parse raises BadCronError, croniter's error too)."""
    if (
        repeat_opts.get("pattern")
        and repeat_opts.get("immediately")
        and (repeat_opts.get("startDate"))
    ):
        raise ValueError("immediately and startDate cannot be used together with a pattern")
    if repeat_opts.get("tz"):
        ZoneInfo(str(repeat_opts["tz"]))  # ZoneInfoNotFoundError names an unknown zone
    spec = {key: value for key, value in repeat_opts.items() if key in _REPEAT_KEYS}
    try:
        return normalize_repeat(spec)
    except InvalidOptionsError as error:
        if error.option != "pattern":
            raise
        raise BadCronError(str(error), option="pattern") from None


def default_repeat_strategy(millis: int, opts: Mapping[str, Any]) -> int | None:
    """When a scheduler with repeat options `opts` runs next, counting from `millis`."""
    spec = _repeat_spec(opts)
    if spec.get("immediately"):
        return _now_ms()
    return first_run(spec, millis or _now_ms())


def _exhausted(repeat_opts: Mapping[str, Any]) -> bool:
    limit, count = repeat_opts.get("limit"), repeat_opts.get("count")
    if limit is not None and count is not None and count + 1 > limit:
        return True
    end = repeat_opts.get("endDate")
    return isinstance(end, int) and end < _now_ms()


class JobScheduler:
    """The schedulers of one queue (`queue` is a Queue or a Worker)."""

    def __init__(self, queue: Any, repeat_strategy: Any = None) -> None:
        self.queue = queue
        self.backend = queue.backend
        self.repeat_strategy = repeat_strategy or default_repeat_strategy

    @property
    def _core(self) -> Any:
        return self.backend.core

    async def upsertJobScheduler(
        self,
        job_scheduler_id: str,
        repeat_opts: Mapping[str, Any] | None,
        job_name: str | None = None,
        job_data: Any = None,
        opts: Mapping[str, Any] | None = None,
        override: bool | Mapping[str, Any] = True,
        producer_id: str | None = None,
    ) -> Job | None:
        """Create or replace a scheduler; returns its pending job, or None when its
        options allow no further run. Without `override`, an existing scheduler is kept:
        psyq's store adds each next run itself when the previous one starts. `override`
        may be Node's sixth argument `{"override", "producerId"}`."""
        if isinstance(override, Mapping):
            producer_id = override.get("producerId", producer_id)
            override = bool(override.get("override", True))
        _check_job_name(job_name)
        repeat_opts = dict(repeat_opts or {})
        spec = _repeat_spec(repeat_opts)
        if _exhausted(repeat_opts):
            return None
        if not override and await self.isJobScheduler(job_scheduler_id):
            return None
        template_opts = {k: v for k, v in (opts or {}).items() if k not in _NOT_IN_TEMPLATE}
        template = {"name": job_name or job_scheduler_id, "data": job_data, "opts": template_opts}
        core = await self._core.upsert_job_scheduler(job_scheduler_id, spec, template)
        return None if core is None else Job.wrap(self.queue, core)

    async def removeJobScheduler(self, job_scheduler_id: str) -> int:
        """0 when the scheduler was removed, 1 when there was none (as `bullmq`)."""
        return 0 if await self._core.remove_job_scheduler(job_scheduler_id) else 1

    async def isJobScheduler(self, job_scheduler_id: str) -> bool:
        return await self._core.get_job_scheduler(job_scheduler_id) is not None

    async def getScheduler(self, job_scheduler_id: str) -> dict[str, Any] | None:
        entry = await self._core.get_job_scheduler(job_scheduler_id)
        return None if entry is None else _public(entry)

    async def getJobSchedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[dict[str, Any]]:
        return [_public(entry) for entry in await self._core.get_job_schedulers(start, end, asc)]

    async def getSchedulersCount(self) -> int:
        return int(await self._core.get_job_schedulers_count())

    # ------------------------------------------------------------------ Node BullMQ's own
    # (Node's JobScheduler is a queue of its own; this one answers for the queue it was
    # made from: psyq.compat.bullmq.node_surface)
    @property
    def name(self) -> str:
        return str(self.queue.name)

    @property
    def qualifiedName(self) -> str:
        return str(self.queue.qualifiedName)

    @property
    def opts(self) -> dict[str, Any]:
        return dict(self.queue.opts)

    @property
    def keys(self) -> Any:
        return self.queue.keys

    @property
    def closing(self) -> bool:
        return bool(getattr(self.queue, "closing", False))

    def toKey(self, type: str) -> str:
        return f"{self.qualifiedName}:{type}"

    def getBackend(self) -> Any:
        return self.backend

    async def waitUntilReady(self) -> None:
        await self.backend.open()

    def emit(self, event: str, *args: Any) -> bool:
        return bool(self.queue.emit(event, *args))

    async def close(self) -> None:
        """Nothing to close: the Queue or Worker this was made from owns the store."""

    async def disconnect(self) -> None:
        await self.close()


def _check_job_name(job_name: Any) -> None:
    """Node BullMQ's third argument is a template `{name, data, opts}`; the `bullmq`
    package's (and the layer's) is the job's name, the rest given by keyword."""
    if isinstance(job_name, Mapping):
        raise TypeError(
            f"upsertJobScheduler takes the job template as keyword arguments "
            f"job_name=..., job_data=..., opts=... (the bullmq package's form), got "
            f"{dict(job_name)!r} as job_name (Node BullMQ's template form)"
        )
    if job_name is not None and not isinstance(job_name, str):
        raise TypeError(f"upsertJobScheduler's job_name must be a string, got {job_name!r}")


def _public(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A core scheduler entry with `bullmq`'s names (`id`, decoded template)."""
    result = dict(entry)
    result["id"] = entry.get("key")
    template = dict(entry.get("template") or {})
    data = template.get("data")
    if isinstance(data, str):
        with contextlib.suppress(ValueError):
            template["data"] = json.loads(data)
    template["opts"] = decode_opts(template.get("opts") or {})
    result["template"] = template
    return result


def _transform_scheduler_data(
    key: str, data: Mapping[str, Any], next_millis: int | None
) -> dict[str, Any] | None:
    """A scheduler's description from its hash, or from an old-style repeatable key
    `name:id:endDate:tz:pattern` when there is no hash; None when neither says anything."""
    if data:
        return _public({"key": key, **data, "next": next_millis})
    parts = key.split(":")
    if len(parts) < 5:
        return None
    name, job_id, end, tz = parts[0], parts[1], parts[2], parts[3]
    return {
        "key": key,
        "name": name,
        "id": job_id or None,
        "endDate": int(end) if end.isdigit() else None,
        "tz": tz or None,
        "pattern": ":".join(parts[4:]) or None,
        "next": next_millis,
    }
