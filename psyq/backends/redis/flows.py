"""Reading flows: a job tree, a parent's dependencies and its children's values."""

from __future__ import annotations

from psyq.backends.base import Dependencies, FlowTree
from psyq.backends.redis.connection import RedisConnection


class Flows(RedisConnection):
    """Flow reads."""

    async def get_flow(
        self, queue: str, job_id: str, depth: int, max_children: int
    ) -> FlowTree | None:
        record = await self.get_job(queue, job_id)
        if record is None:
            return None
        children: list[FlowTree] = []
        if depth != 1:
            keys = await self._children_keys(f"{self.queue_key(queue)}:{job_id}")
            for child_key in keys[: max_children or None]:
                child_queue, child_id = self._split_key(child_key)
                node = await self.get_flow(child_queue, child_id, max(0, depth - 1), max_children)
                if node is not None:
                    children.append(node)
        return {"job": record, "children": children}

    def _split_key(self, job_key: str) -> tuple[str, str]:
        """(queue name, id) of a job key "<prefix>:<queue>:<id>"."""
        _prefix, queue, job_id = job_key.split(":", 2)
        return queue, job_id

    async def _children_keys(self, job_key: str) -> list[str]:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.smembers(job_key + ":dependencies").hkeys(job_key + ":processed")
            pipe.zrange(job_key + ":unsuccessful", 0, -1).hkeys(job_key + ":failed")
            pending, processed, failed, ignored = await pipe.execute()
        return [*sorted(pending), *processed, *failed, *ignored]

    async def get_dependencies(self, queue: str, job_id: str) -> Dependencies:
        job_key = f"{self.queue_key(queue)}:{job_id}"
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(job_key + ":processed").smembers(job_key + ":dependencies")
            pipe.hgetall(job_key + ":failed")
            processed, pending, ignored = await pipe.execute()
        return {
            "processed": dict(processed),
            "unprocessed": sorted(pending),
            "failed": await self.get_failed_children_values(queue, job_id),
            "ignored": dict(ignored),
        }

    async def get_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        values: dict[str, str] = await self.client.hgetall(
            f"{self.queue_key(queue)}:{job_id}:processed"
        )
        return values

    async def get_failed_children_values(self, queue: str, job_id: str) -> dict[str, str]:
        keys = await self.client.zrange(f"{self.queue_key(queue)}:{job_id}:unsuccessful", 0, -1)
        if not keys:
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hget(key, "failedReason")
            reasons = await pipe.execute()
        return {key: reason or "" for key, reason in zip(keys, reasons, strict=True)}
