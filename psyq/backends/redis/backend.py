"""`redis://` / `rediss://` / `redis+cluster://`: queues stored exactly as BullMQ 5/6 stores
them.

Every state transition is one Lua script (see `lua/`), so it is atomic; queries read keys
directly. Workers blocked on an empty queue wait with BZPOPMIN on the queue's marker on a
dedicated connection (BullMQ's wake-up), never polling. The backend is put together from
one class per concern, each in its own module:

    connection.py   clients, running scripts (wire.py, scripts.py), queue keys, errors
    adding.py       add_jobs (bulk pipelining), add_flow
    transitions.py  fetch, wait, settle (with fetch-next), locks, stalls, job mutations
    schedulers.py   job schedulers (the next run is computed in Python)
    queries.py      jobs, states, counts, logs, queue list, metrics
    flows.py        flow trees, dependencies, children's values
    admin.py        pause/resume/drain/clean/obliterate, limits, dedup, workers, cancel
    groups.py       groups: their settings, pause/resume, getters (lua/includes/groups.lua)
    events.py       the events stream (QueueEvents)
    transfer.py     export / import pages (psyq migrate)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psyq.backends.base import ExportPage, QueueMeta
from psyq.backends.redis import transfer
from psyq.backends.redis.adding import Adding
from psyq.backends.redis.admin import Admin
from psyq.backends.redis.connection import CONNECTION_ERRORS
from psyq.backends.redis.events import Events
from psyq.backends.redis.flows import Flows
from psyq.backends.redis.groups import RedisGroups
from psyq.backends.redis.queries import Queries
from psyq.backends.redis.settings import parse_redis_url
from psyq.backends.redis.transitions import Transitions

__all__ = ["RedisBackend", "open_redis_backend", "parse_redis_url"]


class RedisBackend(Adding, Transitions, Queries, Flows, Admin, Events, RedisGroups):
    """BullMQ's Redis layout (see the top for where each part lives)."""

    kind = "redis"
    batch_settles = True
    # a turn's settles go out as up to 4 script calls, pipelined on the one connection: Redis
    # runs the next while the worker runs the jobs the first brought back (issue 24)
    settle_groups = 4

    async def register_worker(self, queue: str, worker_name: str, info: Mapping[str, Any]) -> None:
        """Listed (admin.py), then the queue's schedulers repaired (schedulers.py): a
        scheduler whose next run was lost with a stopped worker goes on when one starts."""
        await super().register_worker(queue, worker_name, info)
        try:
            await self.repair_schedulers(queue)
        except CONNECTION_ERRORS as exc:
            raise self._lost(f"repairing the schedulers of {queue!r}", exc) from exc

    # ------------------------------------------------------------------ export / import
    async def export_jobs(self, queue: str, cursor: str | None, limit: int) -> ExportPage:
        page = await transfer.export_jobs(self, queue, cursor, limit)
        page.key_prefix = self.key_prefix
        return page

    async def import_jobs(self, queue: str, page: ExportPage, overwrite: bool = False) -> int:
        return await transfer.import_jobs(self, queue, self.own_keys(page), overwrite)

    async def get_queue_meta(self, queue: str) -> QueueMeta:
        return await transfer.get_queue_meta(self, queue)

    async def set_queue_meta(self, queue: str, meta: QueueMeta) -> None:
        await transfer.set_queue_meta(self, queue, meta)


def open_redis_backend(url: str) -> RedisBackend:
    """Entry point of the `redis`, `rediss`, `redis+cluster`, `rediss+cluster`,
    `redis+sentinel` and `rediss+sentinel` schemes."""
    return RedisBackend(url)
