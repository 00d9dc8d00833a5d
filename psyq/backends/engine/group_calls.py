"""`EngineGroups`: the contract's Groups calls on the engine (memory://, sqlite, psyq://).

Each call is one store call under the queue's lock (`MemoryBackend._run`); the structures
are the store's `GroupLines` (groups.py). A change of a group's settings is a change of
the queue's settings (`changed`), so a file keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from psyq.backends.base import GroupInfo, JobRecord, Limiter
from psyq.backends.contract.groups import Groups
from psyq.backends.engine.store import QueueStore
from psyq.rules.slices import inclusive_slice

__all__ = ["EngineGroups"]

T = TypeVar("T")


class EngineGroups(Groups):
    """Mixed into `MemoryBackend`, which gives `_run` and `_now`."""

    if TYPE_CHECKING:  # MemoryBackend's

        def _run(
            self, queue: str, action: Callable[[QueueStore], T], notify: bool = False
        ) -> T: ...

        def _now(self) -> int: ...

    def _set(self, queue: str, group_id: str, name: str, value: object) -> bool:
        def change(store: QueueStore) -> bool:
            changed = store.groups.set(group_id, name, value)
            store.changed()
            return changed

        return self._run(queue, change, notify=True)

    async def set_group_concurrency(
        self, queue: str, group_id: str, concurrency: int | None
    ) -> None:
        self._set(queue, group_id, "concurrency", concurrency)

    async def get_group_concurrency(self, queue: str, group_id: str) -> int | None:
        return self._run(queue, lambda s: s.groups.settings.get(group_id, {}).get("concurrency"))

    async def set_group_rate_limit(
        self, queue: str, group_id: str, limiter: Limiter | None
    ) -> None:
        value = None if limiter is None else [limiter.max, limiter.duration]
        self._set(queue, group_id, "limiter", value)

    async def rate_limit_group(self, queue: str, group_id: str, delay_ms: int) -> None:
        until = self._now() + delay_ms
        self._run(queue, lambda s: s.groups.limit(group_id, until))

    async def get_group_rate_limit_ttl(self, queue: str, group_id: str) -> int:
        now = self._now()
        return self._run(queue, lambda s: s.groups.limited_for(group_id, now))

    async def pause_group(self, queue: str, group_id: str) -> bool:
        return self._set(queue, group_id, "paused", True)

    async def resume_group(self, queue: str, group_id: str) -> bool:
        return self._set(queue, group_id, "paused", None)

    async def get_group_jobs(
        self, queue: str, group_id: str, start: int, end: int
    ) -> list[JobRecord]:
        def read(store: QueueStore) -> list[JobRecord]:
            group = store.groups.groups.get(group_id)
            ids = [] if group is None else list(group.ordered())
            return store.peek(inclusive_slice(ids, start, end))

        return self._run(queue, read)

    async def get_groups_job_count(self, queue: str) -> int:
        return self._run(queue, lambda s: s.groups.waiting)

    async def get_group_active_count(self, queue: str, group_id: str) -> int:
        return self._run(queue, lambda s: s.groups.active_of(group_id))

    async def get_counts_per_priority_for_group(
        self, queue: str, group_id: str, priorities: Sequence[int]
    ) -> dict[str, int]:
        def count(store: QueueStore) -> dict[str, int]:
            group = store.groups.groups.get(group_id)
            found = {0: 0 if group is None else len(group.line)}
            if group is not None and group.prio is not None:
                for priority, _, _ in group.prio.ordered():
                    found[priority] = found.get(priority, 0) + 1
            return {str(priority): found.get(priority, 0) for priority in priorities}

        return self._run(queue, count)

    async def get_groups(self, queue: str, start: int, end: int) -> list[GroupInfo]:
        now = self._now()

        def listing(store: QueueStore) -> list[GroupInfo]:
            ids = inclusive_slice(store.groups.listed(), start, end)
            return [store.groups.info(gid, None, now) for gid in ids]

        return self._run(queue, listing)

    async def get_groups_count(self, queue: str) -> int:
        return self._run(queue, lambda s: len(s.groups.listed()))
