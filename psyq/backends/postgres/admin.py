"""Queue administration: pause, resume, drain, clean, obliterate, bulk retry and
promotion, through the layout's functions."""

from __future__ import annotations

from psyq.backends.base import Limiter
from psyq.backends.postgres.connection import BullmqConnection
from psyq.backends.postgres.locks import Obliterating
from psyq.errors import PsyqError

__all__ = ["Admin"]

OBLITERATE_CHUNK = 1000  # jobs deleted per obliterate call


class Admin(BullmqConnection):
    """Whole-queue operations."""

    async def pause(self, queue: str) -> None:
        await self._rows("admin.pause", queue, True)

    async def resume(self, queue: str) -> None:
        await self._rows("admin.pause", queue, False)
        self._made_waiting(queue)

    async def drain(self, queue: str, delayed: bool) -> None:
        await self._rows("admin.drain", queue, delayed)

    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        layout_state = "waiting" if state in ("wait", "paused") else state
        rows = await self._rows("admin.clean", queue, layout_state, grace_ms, limit)
        if not rows:  # the layout announces only cleans that removed something
            await self._rows("events.publish", queue, "cleaned", '{"count": "0"}')
        return [row["id"] for row in rows]

    async def obliterate(self, queue: str, force: bool) -> None:
        """The layout refuses a queue that is not paused; psyq's obliterate pauses it."""
        await self.pause(queue)
        while True:
            rows = await self._rows_in_order(
                Obliterating(queue), "admin.obliterate", queue, OBLITERATE_CHUNK, force
            )
            cursor = int(rows[0][0])
            if cursor == 0:
                return
            if cursor == -2:
                raise PsyqError(f"cannot obliterate queue {queue!r}: it has active jobs")
            if cursor < 0:
                raise PsyqError(f"cannot obliterate queue {queue!r}: code {cursor}")

    async def retry_jobs(self, queue: str, state: str, count: int, timestamp_ms: int) -> int:
        moved = await self._value("admin.retry_jobs", queue, state, count or None, timestamp_ms)
        self._made_waiting(queue)
        return int(moved or 0)

    async def promote_jobs(self, queue: str, count: int) -> int:
        moved = await self._value("admin.promote_jobs", queue, count or None)
        self._made_waiting(queue)
        return int(moved or 0)

    # ------------------------------------------------------------------ limits
    async def rate_limit(self, queue: str, delay_ms: int) -> None:
        await self._rows("admin.rate_limit", queue, delay_ms)

    async def get_rate_limit_ttl(self, queue: str, max_jobs: int | None) -> int:
        return int(await self._value("admin.rate_limit_ttl", queue, max_jobs or 0))

    async def remove_rate_limit_key(self, queue: str) -> bool:
        return bool(await self._value("admin.remove_rate_limit", queue))

    async def set_global_rate_limit(self, queue: str, limiter: Limiter | None) -> None:
        if limiter is None:
            await self._rows("admin.remove_meta", queue, ["max", "duration"])
        else:
            values = [str(limiter.max), str(limiter.duration)]
            await self._rows("admin.set_meta", queue, ["max", "duration"], values)

    async def set_global_concurrency(self, queue: str, concurrency: int | None) -> None:
        if concurrency is None:
            await self._rows("admin.remove_meta", queue, ["concurrency"])
        else:
            await self._rows("admin.set_meta", queue, ["concurrency"], [str(concurrency)])

    # ------------------------------------------------------------------ deduplication
    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        found = await self._value("admin.dedup_job", queue, dedup_id)
        return None if found is None else str(found)

    async def remove_deduplication_key(
        self, queue: str, dedup_id: str, job_id: str | None = None
    ) -> bool:
        return bool(await self._rows("admin.remove_dedup", queue, dedup_id, job_id))
