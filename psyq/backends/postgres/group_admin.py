"""The queue-wide calls that must see grouped waiting jobs as the waiting jobs they are:
drain and clean (through the layout's functions, the lines lent to them as waiting jobs:
sql/groups.sql `expose` and `hide`), obliterate (the groups' rows go too), and the queue's
meta (the groups' own settings, for `psyq migrate`)."""

from __future__ import annotations

from typing import Any

import asyncpg

from psyq.backends.contract.shapes import GroupSettings, QueueMeta
from psyq.backends.postgres.admin import Admin

__all__ = ["GroupQueueAdmin"]


def _settings(row: asyncpg.Record) -> GroupSettings:
    settings: GroupSettings = {}
    if row["concurrency"] is not None:
        settings["concurrency"] = int(row["concurrency"])
    if row["limit_max"] is not None:
        settings["limiter"] = [int(row["limit_max"]), int(row["limit_duration"] or 0)]
    if row["paused"]:
        settings["paused"] = True
    return settings


class GroupQueueAdmin(Admin):
    """Drain, clean, obliterate and the queue's meta, with the groups."""

    async def _with_lines_exposed(self, queue: str, name: str, *args: Any) -> list[Any]:
        """Run statement `name` in one transaction with the queue's lines as waiting jobs."""

        async def run(conn: asyncpg.Connection) -> list[Any]:
            async with conn.transaction():
                await conn.execute(self._q["groups.expose"], queue)
                rows: list[Any] = await conn.fetch(self._q[name], *args)
                await conn.execute(self._q["groups.hide"], queue)
            return rows

        return await self._on_connection(run)

    async def drain(self, queue: str, delayed: bool) -> None:
        await self._with_lines_exposed(queue, "admin.drain", queue, delayed)

    async def clean(self, queue: str, grace_ms: int, limit: int, state: str) -> list[str]:
        """Grouped waiting jobs are cleaned with the waiting ones ("wait"), never with the
        delayed ones."""
        if state not in ("wait", "paused", "delayed"):
            return await super().clean(queue, grace_ms, limit, state)
        layout_state = "waiting" if state in ("wait", "paused") else state
        rows = await self._with_lines_exposed(
            queue, "admin.clean", queue, layout_state, grace_ms, limit
        )
        if not rows:  # the layout announces only cleans that removed something
            await self._rows("events.publish", queue, "cleaned", '{"count": "0"}')
        return [row["id"] for row in rows]

    async def obliterate(self, queue: str, force: bool) -> None:
        await super().obliterate(queue, force)
        await self._rows("groups.forget_queue", queue)

    async def get_queue_meta(self, queue: str) -> QueueMeta:
        meta = await super().get_queue_meta(queue)
        rows = await self._rows("groups.settings_of_queue", queue)
        meta["groups"] = {row["group_id"]: _settings(row) for row in rows}  # {} as every store
        return meta

    async def set_queue_meta(self, queue: str, meta: QueueMeta) -> None:
        await super().set_queue_meta(queue, meta)
        for group_id, settings in (meta.get("groups") or {}).items():
            limiter = settings.get("limiter")
            await self._rows(
                "groups.set_settings",
                queue,
                group_id,
                settings.get("concurrency"),
                limiter[0] if limiter else None,
                limiter[1] if limiter else None,
                bool(settings.get("paused")),
            )
