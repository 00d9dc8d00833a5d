"""Adding jobs: one by one, in bulk (one script call per 1,000 jobs, pipelined in one
MULTI/EXEC past that), and flows (one addFlow call for the whole tree).

Single adds to a queue are gathered while one is in flight (`_add_one`): a lone add goes to
Redis at once, as before; adds that arrive while another add to the same queue waits for its
reply (a web app's many requests) are gathered until the end of the event-loop turn and sent
as one addJobs call, so Redis runs one script (one clock read, one meta read, one marker)
for all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from psyq.backends.base import (
    ErrorCode,
    FlowNode,
    JobRecord,
    NewJob,
    raise_for_code,
)
from psyq.backends.redis.cluster import check_one_slot
from psyq.backends.redis.connection import RedisConnection
from psyq.backends.redis.groups import GROUP_MAX_SIZE
from psyq.backends.redis.jobs import add_args, add_meta, encode_opts
from psyq.errors import GroupMaxSizeExceededError, PsyqError

ADD_CHUNK = 1000  # jobs per addJobs call when a bulk add is pipelined


_Gathered = list[tuple[NewJob, "asyncio.Future[JobRecord]"]]


class Adding(RedisConnection):
    """Adds: jobs one by one or in bulk, and flows."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._adds_out: dict[str, int] = {}  # queue -> single-add calls waiting for Redis
        self._gathering: dict[str, _Gathered] = {}  # queue -> adds of this turn, not sent yet
        self._gathered_calls: set[asyncio.Task[None]] = set()

    async def add_jobs(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        if len(jobs) == 1 and "parent" not in jobs[0].opts:
            return [await self._add_one(queue, jobs[0])]
        if queue in self._gathering:  # adds called before this one go first
            self._send_gathered(queue)
            await asyncio.sleep(0)  # the gathered call's task writes its script call
        return await self._add_now(queue, jobs)

    async def _add_one(self, queue: str, new: NewJob) -> JobRecord:
        """A lone add goes at once; one arriving while an add to `queue` is out (or while
        others are gathered) is gathered with the others of this loop turn (see the top)."""
        out = self._adds_out
        if queue not in out and queue not in self._gathering:
            out[queue] = 1
            try:
                result = await self._run("addJobs", queue, add_args((new,)))
            finally:
                self._add_back(queue)
            if len(result) == 3 and int(result[2]) == 1:  # added (else an existing id, a
                # deduplicated add, or a refusal: _added says)
                return self._new_record(queue, str(result[1]), new, int(result[0]))
            [record] = await self._added(queue, [new], 0, result)
            return record
        loop = asyncio.get_running_loop()
        gathered = self._gathering.get(queue)
        if gathered is None:
            gathered = self._gathering[queue] = []
            loop.call_soon(self._send_gathered, queue)
        future: asyncio.Future[JobRecord] = loop.create_future()
        gathered.append((new, future))
        return await future

    def _send_gathered(self, queue: str) -> None:
        """Send the adds gathered for `queue` (at the end of the loop turn, or before a bulk
        add to the same queue: then the turn's callback finds nothing left)."""
        gathered = [(new, f) for new, f in self._gathering.pop(queue, ()) if not f.done()]
        if gathered:  # callers cancelled before the send add nothing
            # the adds that were out may have had their replies meanwhile
            self._adds_out[queue] = self._adds_out.get(queue, 0) + 1
            task = asyncio.ensure_future(self._add_gathered(queue, gathered))
            self._gathered_calls.add(task)
            task.add_done_callback(self._gathered_calls.discard)

    async def _add_gathered(self, queue: str, gathered: _Gathered) -> None:
        try:
            records = await self._add_now(queue, [new for new, _ in gathered])
        except BaseException as exc:  # one call for all: each caller sees its failure
            for _, future in gathered:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for (_, future), record in zip(gathered, records, strict=True):
                if not future.done():
                    future.set_result(record)
        finally:
            self._add_back(queue)

    def _add_back(self, queue: str) -> None:
        """One single-add call to `queue` has its reply."""
        if self._adds_out[queue] == 1:
            del self._adds_out[queue]
        else:
            self._adds_out[queue] -= 1

    async def close(self) -> None:
        if self._gathered_calls:  # adds already gathered finish first
            await asyncio.gather(*self._gathered_calls, return_exceptions=True)
        await super().close()

    async def _add_now(self, queue: str, jobs: Sequence[NewJob]) -> list[JobRecord]:
        chunks = [jobs[i : i + ADD_CHUNK] for i in range(0, len(jobs), ADD_CHUNK)]
        with_parents = [new.opts["parent"] for new in jobs if "parent" in new.opts]
        if self.cluster and with_parents:
            parent_keys = {str(parent["queue"]) for parent in with_parents}  # `<prefix>:<q>`
            check_one_slot({self.queue_key(queue), *parent_keys}, "a child and its parent")
        # a maxSize is checked over the whole bulk, before anything is written: one call
        sized = any("maxSize" in new.opts.get("group", ()) for new in jobs)
        if len(chunks) == 1 or with_parents or sized:
            results = [await self._run("addJobs", queue, add_args(jobs))]
        elif self.wait_replicas:  # each call waits for the replicas (a MULTI of all would not)
            results = [await self._run("addJobs", queue, add_args(chunk)) for chunk in chunks]
        else:
            results = await self._add_pipelined(queue, chunks)
        records: list[JobRecord] = []
        offset = 0
        for result in results:
            records += await self._added(queue, jobs, offset, result)
            offset += (len(result) - 1) // 2
        return records

    async def _add_pipelined(self, queue: str, chunks: list[Sequence[NewJob]]) -> list[Any]:
        """Big bulks: one addJobs call per chunk, all in one MULTI/EXEC round trip."""
        script = self._scripts["addJobs"]
        queue_key = self.queue_key(queue)
        keys = script.keys(queue_key)
        try:
            await self.client.script_load(script.source)
            async with self.client.pipeline(transaction=True) as pipe:
                for chunk in chunks:
                    evalsha = (
                        "EVALSHA",
                        script.sha,
                        len(keys),
                        *keys,
                        f"{queue_key}:",
                        add_args(chunk),
                    )
                    pipe.execute_command(*evalsha)  # pipe.evalsha: refused by cluster pipelines
                return list(await pipe.execute())
        except RedisError as exc:
            raise PsyqError(f"Redis bulk add failed on queue {queue!r}: {exc}") from exc

    async def _added(
        self, queue: str, jobs: Sequence[NewJob], offset: int, result: list[Any]
    ) -> list[JobRecord]:
        if int(result[0]) == ErrorCode.PARENT_MISSING:
            parent = jobs[offset + int(result[1]) - 1].opts["parent"]
            raise_for_code(ErrorCode.JOB_MISSING, parent["queue"], parent["id"], "add a child to")
        if int(result[0]) == GROUP_MAX_SIZE:
            group = jobs[offset + int(result[1]) - 1].opts["group"]
            raise GroupMaxSizeExceededError(queue, str(group["id"]), int(group["maxSize"]))
        now = int(result[0])
        added = jobs[offset : offset + (len(result) - 1) // 2]
        ids, statuses = result[1::2], result[2::2]
        new_record = self._new_record
        if statuses.count(1) == len(statuses):  # all new (no existing id, no duplicate)
            pairs = zip(added, ids, strict=True)
            return [new_record(queue, str(job_id), new, now) for new, job_id in pairs]
        records = []
        for new, job_id, status in zip(added, map(str, ids), map(int, statuses), strict=True):
            if status == 1:
                records.append(new_record(queue, job_id, new, now))
            else:
                existing = await self.get_job(queue, job_id)
                if existing is None:
                    raise PsyqError(f"job {job_id!r} of {queue!r} vanished while adding")
                records.append(existing)
        return records

    @staticmethod
    def _new_record(queue: str, job_id: str, new: NewJob, now: int) -> JobRecord:
        opts = new.opts
        timestamp = now if new.timestamp is None else new.timestamp
        if not opts:  # the usual job of a bulk add
            record = JobRecord(job_id, queue, new.name, new.data, opts, timestamp)
            record.state = "waiting"
            return record
        parent = opts.get("parent")
        record = JobRecord(
            job_id,
            queue,
            new.name,
            new.data,
            opts,
            timestamp,
            opts.get("delay", 0),
            opts.get("priority", 0),
            parent_key=None if parent is None else f"{parent['queue']}:{parent['id']}",
        )
        if record.delay > 0:
            record.state = "delayed"
        else:
            record.state = "prioritized" if record.priority > 0 else "waiting"
        return record

    async def add_flow(self, roots: Sequence[FlowNode]) -> list[JobRecord]:
        nodes: list[tuple[FlowNode, int]] = []  # pre-order, with 1-based parent index

        def walk(node: FlowNode, parent: int) -> None:
            nodes.append((node, parent))
            index = len(nodes)
            for child in node.children:
                walk(child, index)

        for root in roots:
            walk(root, 0)
        args: list[Any] = []
        for node, parent in nodes:
            new = node.job
            meta = add_meta(new, hold=bool(node.children), parent_flags=parent > 0)
            args += (
                self.queue_key(node.queue) + ":",
                parent,
                meta,
                new.data,
                encode_opts(new.opts),
            )
        if self.cluster:
            check_one_slot({self.queue_key(node.queue) for node, _ in nodes}, "a flow")
        result = await self._run("addFlow", nodes[0][0].queue, *args)
        if int(result[0]) == ErrorCode.PARENT_MISSING:
            parent = nodes[int(result[1]) - 1][0].job.opts["parent"]
            raise_for_code(ErrorCode.JOB_MISSING, parent["queue"], parent["id"], "add a child to")
        if int(result[0]) == GROUP_MAX_SIZE:
            node = nodes[int(result[1]) - 1][0]
            group = node.job.opts["group"]
            raise GroupMaxSizeExceededError(node.queue, str(group["id"]), int(group["maxSize"]))
        return await self._flow_records(nodes, result)

    async def _flow_records(
        self, nodes: list[tuple[FlowNode, int]], result: list[Any]
    ) -> list[JobRecord]:
        now = int(result[0])
        records: list[JobRecord] = []
        for i, (node, parent) in enumerate(nodes):
            job_id, status = str(result[1 + 2 * i]), int(result[2 + 2 * i])
            if status == 1:
                record = self._new_record(node.queue, job_id, node.job, now)
                if node.children:
                    record.state = "waiting-children"
            else:
                found = await self.get_job(node.queue, job_id)
                if found is None:
                    raise PsyqError(f"job {job_id!r} of {node.queue!r} vanished while adding")
                record = found
            if parent > 0:
                parent_node = nodes[parent - 1][0]
                parent_id = records[parent - 1].id
                record.parent_key = f"{self.queue_key(parent_node.queue)}:{parent_id}"
            records.append(record)
        return records
