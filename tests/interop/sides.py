"""The two sides of the interop matrix behind one interface: `NodeSide` drives Node BullMQ
through one long-lived `node/driver.js` process (JSON lines on its stdin/stdout; each
NodeSide names its store, Redis or Postgres, in every request), `PsyqSide` drives psyq in
this process (its URL names the store). Both have the same methods, so a case (matrix.py)
is written once and runs both ways.

Jobs are described the same on both sides (`job()` returns BullMQ's camelCase fields), and
both sides' workers run the same processor: `job.data["steps"]`, in order (see driver.js's
`runSteps`): progress, log, fail, failUntil (fail until attempt n), unrecoverable, delay
(move_to_delayed), child (add a child, wait for it), rateLimit, sleep, childrenValues,
ignoredFailures and return; a step with `once` runs on the job's first pass only (marked in
its data)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psyq

DRIVER = Path(__file__).parent / "node" / "driver.js"
PREFIX = "bull"


class NodeDriver:
    """One `node driver.js` process; `call(op, **args)` from any thread or event loop. It
    serves every store named once with `use` (driver.js)."""

    def __init__(self, modules: Path) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
        env = {**os.environ, "NODE_PATH": str(modules)}
        self._proc = subprocess.Popen(
            ["node", str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._pending: dict[int, concurrent.futures.Future[Any]] = {}
        self._ids = 0
        self.stores: set[str] = set()  # the stores named to it with `use`
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            answer = json.loads(line)
            with self._lock:
                future = self._pending.pop(answer["req"])
            if "error" in answer:
                future.set_exception(NodeError(answer["error"]))
            else:
                future.set_result(answer["ok"])
        with self._lock:
            for future in self._pending.values():
                future.set_exception(NodeError(f"node exited: {self.stderr()}"))
            self._pending.clear()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def submit(self, op: str, **args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._ids += 1
            self._pending[self._ids] = future
            line = json.dumps({"req": self._ids, "op": op, **args})
        assert self._proc.stdin is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        return future

    async def call(self, op: str, timeout: float = 20, **args: Any) -> Any:
        return await asyncio.wait_for(asyncio.wrap_future(self.submit(op, **args)), timeout)

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


class NodeError(Exception):
    """A request the Node driver answered with an error (its stack)."""


class NodeSide:
    name = "node"

    def __init__(self, driver: NodeDriver, store: str) -> None:
        self.driver = driver
        self.store = store
        self._workers: list[int] = []
        self._events: list[int] = []
        self._queues: set[str] = set()

    async def _call(self, op: str, **args: Any) -> Any:
        if "queue" in args:
            self._queues.add(args["queue"])
        return await self.driver.call(op, store=self.store, **args)

    async def add(
        self, queue: str, name: str, data: Any, opts: Mapping[str, Any] | None = None
    ) -> str:
        return str(await self._call("add", queue=queue, name=name, data=data, opts=opts or {}))

    async def add_bulk(self, queue: str, jobs: list[dict[str, Any]]) -> list[str]:
        return [str(i) for i in await self._call("addBulk", queue=queue, jobs=jobs)]

    async def add_flow(self, tree: Mapping[str, Any]) -> dict[str, Any]:
        return dict(await self._call("flow", tree=tree))

    async def job(self, queue: str, job_id: str) -> dict[str, Any] | None:
        found = await self._call("job", queue=queue, id=job_id)
        return None if found is None else dict(found)

    async def counts(self, queue: str, *types: str) -> dict[str, int]:
        return dict(await self._call("counts", queue=queue, types=list(types)))

    async def get_jobs(self, queue: str, types: list[str], asc: bool = True) -> list[str]:
        return list(await self._call("getJobs", queue=queue, types=types, asc=asc))

    async def start_worker(self, queue: str, **opts: Any) -> int:
        handle = int(await self._call("startWorker", queue=queue, opts=opts))
        self._workers.append(handle)
        return handle

    async def stop_worker(self, handle: int) -> list[str]:
        self._workers.remove(handle)
        return list(await self._call("stopWorker", handle=handle))

    async def worker_errors(self, handle: int) -> list[str]:
        return list(await self._call("workerErrors", handle=handle))

    async def start_events(self, queue: str) -> int:
        handle = int(await self._call("startEvents", queue=queue))
        self._events.append(handle)
        return handle

    async def events(self, handle: int) -> list[dict[str, Any]]:
        return list(await self._call("events", handle=handle))

    async def stop_events(self, handle: int) -> None:
        self._events.remove(handle)
        await self._call("stopEvents", handle=handle)

    async def pause(self, queue: str) -> None:
        await self._call("pause", queue=queue)

    async def resume(self, queue: str) -> None:
        await self._call("resume", queue=queue)

    async def is_paused(self, queue: str) -> bool:
        return bool(await self._call("isPaused", queue=queue))

    async def retry(self, queue: str, job_id: str) -> None:
        await self._call("retry", queue=queue, id=job_id)

    async def promote(self, queue: str, job_id: str) -> None:
        await self._call("promote", queue=queue, id=job_id)

    async def remove(self, queue: str, job_id: str) -> bool:
        return bool(await self._call("remove", queue=queue, id=job_id))

    async def set_global_concurrency(self, queue: str, concurrency: int) -> None:
        await self._call("setGlobalConcurrency", queue=queue, concurrency=concurrency)

    async def change_priority(self, queue: str, job_id: str, priority: int) -> None:
        await self._call("changePriority", queue=queue, id=job_id, priority=priority)

    async def change_delay(self, queue: str, job_id: str, delay: int) -> None:
        await self._call("changeDelay", queue=queue, id=job_id, delay=delay)

    async def update_data(self, queue: str, job_id: str, data: Any) -> None:
        await self._call("updateData", queue=queue, id=job_id, data=data)

    async def drain(self, queue: str, delayed: bool = False) -> None:
        await self._call("drain", queue=queue, delayed=delayed)

    async def clean(self, queue: str, grace: int, limit: int, kind: str) -> list[str]:
        return [
            str(i)
            for i in await self._call("clean", queue=queue, grace=grace, limit=limit, type=kind)
        ]

    async def obliterate(self, queue: str) -> None:
        await self._call("obliterate", queue=queue)

    async def workers(self, queue: str) -> int:
        return int(await self._call("workers", queue=queue))

    async def set_global_rate_limit(self, queue: str, max_jobs: int, duration: int) -> None:
        await self._call("setGlobalRateLimit", queue=queue, max=max_jobs, duration=duration)

    async def deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        found = await self._call("getDeduplicationJobId", queue=queue, dedupId=dedup_id)
        return None if found is None else str(found)

    async def upsert_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: Mapping[str, Any]
    ) -> str | None:
        return await self._call(  # type: ignore[no-any-return]
            "upsertScheduler", queue=queue, id=scheduler_id, repeat=repeat, template=template
        )

    async def remove_scheduler(self, queue: str, scheduler_id: str) -> bool:
        return bool(await self._call("removeScheduler", queue=queue, id=scheduler_id))

    async def schedulers(self, queue: str) -> list[dict[str, Any]]:
        return list(await self._call("getSchedulers", queue=queue))

    async def close(self) -> None:
        for handle in list(self._workers):
            await self.stop_worker(handle)
        for handle in list(self._events):
            await self.stop_events(handle)
        await self._call("forget", queues=sorted(self._queues))


async def _run_steps(job: psyq.Job, worker: psyq.Worker, side: PsyqSide) -> Any:
    """Run the job's `steps` (the matrix's processor, tests/interop/matrix.json) in order; a
    step marked `once` runs on the first attempt only."""
    data = job.data if isinstance(job.data, dict) else {}
    for index, step in enumerate(data.get("steps", [])):
        mark = f"done{index}"
        if step.get("once") and data.get(mark):
            continue
        if step.get("once"):
            data = {**data, mark: True}
            await job.update_data(data)
        await _record(job, step)
        await _raise_if_asked(job, step)
        await _suspend_if_asked(job, worker, side, step)
        finished, value = await _result(job, step)
        if finished:
            return value
    return {"by": "psyq", "name": job.name}


async def _record(job: psyq.Job, step: dict[str, Any]) -> None:
    if "progress" in step:
        await job.update_progress(step["progress"])
    if "log" in step:
        await job.log(step["log"])


async def _raise_if_asked(job: psyq.Job, step: dict[str, Any]) -> None:
    """The steps that fail the attempt, or end it to run later."""
    if "fail" in step:
        raise ValueError(step["fail"])
    if "failUntil" in step and job.attempts_made + 1 < step["failUntil"]:
        raise ValueError(f"attempt {job.attempts_made + 1}")
    if "unrecoverable" in step:
        raise psyq.UnrecoverableError(step["unrecoverable"])
    if "delay" in step:
        await job.move_to_delayed(int(time.time() * 1000) + step["delay"], job.token)
        raise psyq.DelayedError()


async def _suspend_if_asked(
    job: psyq.Job, worker: psyq.Worker, side: PsyqSide, step: dict[str, Any]
) -> None:
    """The steps that park the job: for a child it just added, or for the rate limit."""
    if "child" in step:
        child = step["child"]
        parent = {"id": job.id, "queue": job.queue_qualified_name}  # as Node
        await side.queue(child["queue"]).add(child["name"], child.get("data"), parent=parent)
        assert job.token is not None
        if await job.move_to_waiting_children(job.token):
            raise psyq.WaitingChildrenError()
    if "rateLimit" in step:
        await worker.rate_limit(step["rateLimit"])
        raise psyq.RateLimitError()


async def _result(job: psyq.Job, step: dict[str, Any]) -> tuple[bool, Any]:
    """(True, what the processor returns) for a step that ends the job, else (False, None);
    a `sleep` step waits first (the work taking time is the behaviour asked for)."""
    if "sleep" in step:
        await asyncio.sleep(step["sleep"] / 1000)  # sleep: the job's work, as the step asks
    if "childrenValues" in step:
        return True, await job.get_children_values()
    if "ignoredFailures" in step:  # psyq lists them among the dependencies (docs/api.md)
        return True, (await job.get_dependencies()).get("ignored", {})
    if "return" in step:
        return True, step["return"]
    return False, None


class PsyqSide:
    name = "psyq"

    def __init__(self, url: str) -> None:
        self.url = url
        self._queues: dict[str, psyq.Queue] = {}
        self._workers: dict[int, tuple[psyq.Worker, list[str]]] = {}
        self._events: dict[int, tuple[psyq.QueueEvents, list[dict[str, Any]]]] = {}
        self._handles = 0

    def queue(self, name: str) -> psyq.Queue:
        if name not in self._queues:
            self._queues[name] = psyq.Queue(name, connection=self.url)
        return self._queues[name]

    async def add(
        self, queue: str, name: str, data: Any, opts: Mapping[str, Any] | None = None
    ) -> str:
        return (await self.queue(queue).add(name, data, dict(opts or {}))).id

    async def add_bulk(self, queue: str, jobs: list[dict[str, Any]]) -> list[str]:
        return [job.id for job in await self.queue(queue).add_bulk(jobs)]

    async def add_flow(self, tree: Mapping[str, Any]) -> dict[str, Any]:
        async with psyq.FlowProducer(connection=self.url) as producer:
            node = await producer.add(tree)

        def ids(node: Any) -> dict[str, Any]:
            return {"id": node.job.id, "children": [ids(c) for c in node.children or []]}

        return ids(node)

    async def job(self, queue: str, job_id: str) -> dict[str, Any] | None:
        state = await self.queue(queue).get_job_state(job_id)  # first: see driver.js
        found = await self.queue(queue).get_job(job_id)
        if found is None:
            return None
        logs = await self.queue(queue).get_job_logs(job_id)
        return {
            "id": found.id,
            "name": found.name,
            "data": found.data,
            "opts": found.opts,
            "state": state,
            "returnvalue": found.returnvalue,
            "failedReason": found.failed_reason,
            "stacktrace": list(found.stacktrace or []),
            "attemptsMade": found.attempts_made,
            "attemptsStarted": found.attempts_started,
            "progress": found.progress,
            "delay": found.delay,
            "priority": found.priority,
            "timestamp": found.timestamp,
            "processedOn": found.processed_on,
            "finishedOn": found.finished_on,
            "logs": logs["logs"],
            "parentKey": found.parent_key,
            "repeatJobKey": found.opts.get("repeatJobKey"),
        }

    async def counts(self, queue: str, *types: str) -> dict[str, int]:
        return await self.queue(queue).get_job_counts(*types)

    async def get_jobs(self, queue: str, types: list[str], asc: bool = True) -> list[str]:
        return [job.id for job in await self.queue(queue).get_jobs(types, asc=asc)]

    async def start_worker(self, queue: str, **opts: Any) -> int:
        """A worker with `opts` (BullMQ's names: concurrency, limiter) and `customBackoff`
        ({type, ms}): a custom backoff strategy of that name, always waiting ms."""
        errors: list[str] = []
        holder: list[psyq.Worker] = []

        async def process(job: psyq.Job) -> Any:
            return await _run_steps(job, holder[0], self)

        custom = opts.pop("customBackoff", None)
        if custom is not None:
            opts["backoff_strategies"] = {custom["type"]: lambda *args: custom["ms"]}
        worker = psyq.Worker(queue, process, connection=self.url, drain_delay=1, **opts)
        holder.append(worker)
        worker.on("error", lambda error, *rest: errors.append(str(error)))
        self._handles += 1
        self._workers[self._handles] = (worker, errors)
        return self._handles

    async def stop_worker(self, handle: int) -> list[str]:
        worker, errors = self._workers.pop(handle)
        await worker.close()
        return errors

    async def worker_errors(self, handle: int) -> list[str]:
        return self._workers[handle][1]

    async def start_events(self, queue: str) -> int:
        events = psyq.QueueEvents(queue, connection=self.url, last_event_id="0")
        seen: list[dict[str, Any]] = []
        for name in _EVENT_NAMES:
            events.on(name, _recorder(seen, name))
        await events.wait_until_ready(10)
        self._handles += 1
        self._events[self._handles] = (events, seen)
        return self._handles

    async def events(self, handle: int) -> list[dict[str, Any]]:
        return list(self._events[handle][1])

    async def stop_events(self, handle: int) -> None:
        events, _ = self._events.pop(handle)
        await events.close()

    async def pause(self, queue: str) -> None:
        await self.queue(queue).pause()

    async def resume(self, queue: str) -> None:
        await self.queue(queue).resume()

    async def is_paused(self, queue: str) -> bool:
        return await self.queue(queue).is_paused()

    async def _get(self, queue: str, job_id: str) -> psyq.Job:
        found = await self.queue(queue).get_job(job_id)
        assert found is not None, f"no job {job_id!r} in {queue!r}"
        return found

    async def retry(self, queue: str, job_id: str) -> None:
        await (await self._get(queue, job_id)).retry()

    async def promote(self, queue: str, job_id: str) -> None:
        await (await self._get(queue, job_id)).promote()

    async def remove(self, queue: str, job_id: str) -> bool:
        return await self.queue(queue).remove(job_id)

    async def set_global_concurrency(self, queue: str, concurrency: int) -> None:
        await self.queue(queue).set_global_concurrency(concurrency)

    async def change_priority(self, queue: str, job_id: str, priority: int) -> None:
        await (await self._get(queue, job_id)).change_priority(priority)

    async def change_delay(self, queue: str, job_id: str, delay: int) -> None:
        await (await self._get(queue, job_id)).change_delay(delay)

    async def update_data(self, queue: str, job_id: str, data: Any) -> None:
        await (await self._get(queue, job_id)).update_data(data)

    async def drain(self, queue: str, delayed: bool = False) -> None:
        await self.queue(queue).drain(delayed)

    async def clean(self, queue: str, grace: int, limit: int, kind: str) -> list[str]:
        return await self.queue(queue).clean(grace, limit, kind)

    async def obliterate(self, queue: str) -> None:
        await self.queue(queue).obliterate(force=True)

    async def workers(self, queue: str) -> int:
        return len(await self.queue(queue).get_workers())

    async def set_global_rate_limit(self, queue: str, max_jobs: int, duration: int) -> None:
        await self.queue(queue).set_global_rate_limit(max_jobs, duration)

    async def deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        return await self.queue(queue).get_deduplication_job_id(dedup_id)

    async def upsert_scheduler(
        self, queue: str, scheduler_id: str, repeat: Mapping[str, Any], template: Mapping[str, Any]
    ) -> str | None:
        job = await self.queue(queue).upsert_job_scheduler(scheduler_id, repeat, template)
        return None if job is None else job.id

    async def remove_scheduler(self, queue: str, scheduler_id: str) -> bool:
        return await self.queue(queue).remove_job_scheduler(scheduler_id)

    async def schedulers(self, queue: str) -> list[dict[str, Any]]:
        return await self.queue(queue).get_job_schedulers(asc=True)

    async def close(self) -> None:
        for handle in list(self._workers):
            await self.stop_worker(handle)
        for handle in list(self._events):
            await self.stop_events(handle)
        for queue in self._queues.values():
            await queue.close()


_EVENT_NAMES = (
    "added", "waiting", "active", "progress", "completed", "failed", "delayed", "removed",
    "paused", "resumed", "retries-exhausted", "waiting-children", "deduplicated", "duplicated",
    "stalled", "drained", "cleaned",
)  # fmt: skip


def _recorder(seen: list[dict[str, Any]], name: str) -> Any:
    def record(args: Any = None, *rest: Any) -> None:
        seen.append({"event": name, "args": dict(args) if isinstance(args, Mapping) else {}})

    return record
