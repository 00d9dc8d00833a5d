"""Changing one job: progress, data, logs, priority, delay, promotion, reprocessing,
removal. The layout's functions write the events (progress, priority, delayed...)."""

from __future__ import annotations

import json
from typing import Any

from psyq.backends.base import ErrorCode, raise_for_code
from psyq.backends.postgres.connection import BullmqConnection, LayoutCode

__all__ = ["JobMutations"]


class JobMutations(BullmqConnection):
    """Writes to one job."""

    async def update_progress(self, queue: str, job_id: str, progress: Any) -> None:
        updated = await self._value("jobs.progress", queue, job_id, json.dumps(progress))
        if not updated:
            raise_for_code(ErrorCode.JOB_MISSING, queue, job_id, "update progress")

    async def update_data(self, queue: str, job_id: str, data: str) -> None:
        if not await self._rows("jobs.data", queue, job_id, data):
            raise_for_code(ErrorCode.JOB_MISSING, queue, job_id, "update data")

    async def add_log(self, queue: str, job_id: str, row: str, keep_logs: int | None) -> int:
        await self._transition("jobs.add_log", queue, job_id, "log to", queue, job_id, row)
        if keep_logs is not None:
            return int(await self._value("jobs.keep_logs", queue, job_id, keep_logs))
        return int(await self._value("jobs.log_count", queue, job_id))

    async def clear_logs(self, queue: str, job_id: str, keep: int) -> None:
        await self._value("jobs.keep_logs", queue, job_id, max(keep, 0))

    async def change_priority(
        self, queue: str, job_id: str, priority: int, lifo: bool = False
    ) -> None:
        await self._coded(
            "jobs.priority", queue, job_id, "change priority of", queue, job_id, priority, lifo
        )

    async def change_delay(self, queue: str, job_id: str, delay_ms: int) -> None:
        await self._coded("jobs.delay", queue, job_id, "change delay of", queue, job_id, delay_ms)

    async def promote(self, queue: str, job_id: str) -> None:
        await self._coded("jobs.promote", queue, job_id, "promote", queue, job_id)

    async def reprocess_job(
        self, queue: str, job_id: str, state: str, made: bool = False, started: bool = False
    ) -> None:
        await self._coded(
            "jobs.reprocess", queue, job_id, "reprocess", queue, job_id, state, made, started
        )

    async def remove_job(self, queue: str, job_id: str, remove_children: bool = True) -> bool:
        try:
            return bool(await self._value("jobs.remove", queue, job_id, remove_children))
        except LayoutCode as exc:
            if exc.code == ErrorCode.SCHEDULER_JOB:  # a scheduler's pending run stays
                return False
            raise
