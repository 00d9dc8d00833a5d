"""psyq's worker registry and cancellation requests, in psyq's own tables beside the
layout's (`psyq_worker`, `psyq_cancel`): BullMQ's Postgres layout has no place for them.
A registered worker also holds a session named as Node BullMQ names a worker's, so Node's
getWorkers lists it (presence.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from psyq.backends.postgres.connection import BullmqConnection
from psyq.backends.postgres.presence import PSYQ_WORKER_SUFFIX, worker_session_name
from psyq.errors import PsyqError

__all__ = ["Registry"]

log = logging.getLogger("psyq.postgres")


class Registry(BullmqConnection):
    """Workers listed while they run (renewed every third of worker_ttl), cancellations."""

    _workers: dict[tuple[str, str], str]
    _heartbeat: asyncio.Task[None] | None = None

    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        text = json.dumps(dict(info))
        await self._rows("registry.register", queue, worker_name, text, self._ttl_ms)
        self._registered()[(queue, worker_name)] = text
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._beat())
        if self.settings.announce_workers:
            await self._sessions().add((queue, worker_name), worker_session_name(queue))

    async def unregister_worker(self, queue: str, worker_name: str) -> None:
        self._registered().pop((queue, worker_name), None)
        if self._presence is not None:
            await self._presence.remove((queue, worker_name))
        await self._rows("registry.unregister", queue, worker_name)

    async def get_workers(self, queue: str) -> list[dict[str, Any]]:
        """psyq's workers (from the registry), then Node BullMQ's, found as Node finds them
        (by the application_name of their connections), as on Redis."""
        rows = await self._rows("registry.workers", queue)
        ours = [{"name": r["name"], "started": r["started"], **json.loads(r["info"])} for r in rows]
        nodes = await self._rows("registry.node_workers", queue, PSYQ_WORKER_SUFFIX)
        return ours + [
            {"name": r["name"], "addr": r["addr"], "started": r["started"]} for r in nodes
        ]

    async def cancel_job(self, queue: str, job_id: str, reason: str) -> bool:
        return bool(await self._rows("registry.cancel", queue, job_id, reason))

    async def get_cancelled(self, queue: str, job_ids: Sequence[str]) -> dict[str, str]:
        rows = await self._rows("registry.cancelled", queue, list(job_ids))
        return {row["id"]: row["reason"] for row in rows}

    async def close(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await super().close()

    def _registered(self) -> dict[tuple[str, str], str]:
        if not hasattr(self, "_workers"):
            self._workers = {}
        return self._workers

    @property
    def _ttl_ms(self) -> int:
        return self.settings.worker_ttl * 1000

    async def _beat(self) -> None:
        """Renew this backend's entries while it has any; a failed renewal is logged and
        tried again at the next beat."""
        while self._registered():
            await asyncio.sleep(self.settings.worker_ttl / 3)
            workers = dict(self._registered())
            keys = list(workers)
            try:
                await self._rows(
                    "registry.heartbeat",
                    [k[0] for k in keys],
                    [k[1] for k in keys],
                    [workers[k] for k in keys],
                    self._ttl_ms,
                )
            except PsyqError as exc:
                log.warning("psyq: renewing the worker registry failed: %s", exc)
