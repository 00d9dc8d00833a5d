"""psyq.compat.bullmq on every backend: the `bullmq` package's names, argument shapes,
event arguments and behaviours, each mapped onto psyq's core."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from psyq.compat.bullmq import (
    AbortError,
    AbortSignal,
    FlowProducer,
    Job,
    Queue,
    QueueEvents,
    UnrecoverableError,
    Worker,
)
from tests.conformance.conftest import Recorder
from tests.polling import eventually


async def test_worker_processes_with_job_and_token(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    added = await queue.add("send", {"to": "a@b.c"}, {"removeOnComplete": False})
    seen: list[tuple[Any, Any]] = []

    async def process(job: Job, token: str) -> dict[str, str]:
        seen.append((job.data, token))
        await job.updateProgress(50)
        return {"sent": job.data["to"]}

    worker = Worker(queue_name, process, opts)
    events = Recorder(worker, "active", "progress", "completed")
    try:
        [(job, result)] = await events.wait("completed")
        assert result == {"sent": "a@b.c"}
        assert (job.id, job.returnvalue, job.attemptsMade) == (added.id, result, 1)
        assert seen[0][0] == {"to": "a@b.c"} and isinstance(seen[0][1], str)
        assert events.events["active"][0][1] == "waiting"
        assert events.events["progress"][0][1] == 50
        assert added.id is not None
        stored = await Job.fromId(queue, added.id)
        assert stored is not None
        assert (stored.returnvalue, stored.attemptsMade, stored.progress) == (result, 1, 50)
        assert stored.finishedOn and stored.processedOn
        assert await stored.getState() == "completed"
        on_redis = opts["connection"].startswith("redis")
        assert (worker.redisConnection is not None) == on_redis
        assert (queue.client is not None) == on_redis
    finally:
        await worker.close()
        await queue.close()


async def test_failed_attempts_retry_then_fail(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    await queue.add("a", {"n": 1}, {"attempts": 2, "backoff": {"type": "fixed", "delay": 10}})
    await queue.add("b", {"n": 2}, {"attempts": 5})

    async def process(job: Job, token: str) -> None:
        if job.name == "b":
            raise UnrecoverableError("never")
        raise ValueError(f"no {job.attemptsMade}")

    worker = Worker(queue_name, process, opts)
    events = Recorder(worker, "failed")
    try:
        failures = await events.wait("failed", 3)
        by_name: dict[str, list[Job]] = {}
        for job, error in failures:
            by_name.setdefault(job.name, []).append(job)
            assert isinstance(error, UnrecoverableError if job.name == "b" else ValueError)
        assert [job.attemptsMade for job in by_name["a"]] == [1, 2]
        assert [job.attemptsMade for job in by_name["b"]] == [1]
        failed = await queue.getFailed()
        assert sorted(job.name for job in failed) == ["a", "b"]
        reasons = {job.name: job.failedReason for job in failed}
        assert reasons == {"a": "no 1", "b": "never"}
        assert await queue.getFailedCount() == 2
    finally:
        await worker.close()
        await queue.close()


async def test_counts_types_and_getters(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, {**opts, "defaultJobOptions": {"attempts": 4}})
    try:
        first = await queue.add("w", {"i": 1})
        await queue.addBulk([{"name": "w", "data": {"i": 2}}, {"name": "w", "data": {"i": 3}}])
        await queue.add("d", {}, {"delay": 60_000})
        await queue.add("p", {}, {"priority": 2})
        assert first.attempts == 4 and first.id is not None
        counts = await queue.getJobCounts("wait", "delayed", "prioritized")
        assert counts == {"wait": 3, "delayed": 1, "prioritized": 1}  # the names asked
        assert await queue.getJobCountByTypes("waiting", "delayed") == 4
        waiting = await queue.getWaiting()
        assert [job.data["i"] for job in waiting] == [1, 2, 3]
        assert [job.name for job in await queue.getDelayed()] == ["d"]
        assert await queue.getCountsPerPriority([2, 7, 2]) == {"2": 1, "7": 0}
        assert await queue.getJobState(first.id or "") == "waiting"
        assert await queue.remove(first.id or "") == 1
        assert await queue.getJob(first.id or "") is None
        assert Queue.sanitizeJobTypes(None, []) == list(  # type: ignore[arg-type]
            (
                "active",
                "completed",
                "delayed",
                "failed",
                "prioritized",
                "waiting",
                "waiting-children",
            )
        )
        await queue.pause()
        assert await queue.isPaused()
        await queue.resume()
        await queue.drain(True)
        assert await queue.getJobCountByTypes("waiting", "delayed", "prioritized") == 0
    finally:
        await queue.close()


async def test_manual_processing(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    worker = Worker(queue_name, None, {**opts, "drainDelay": 1})
    active = Recorder(worker, "active")
    try:
        await queue.add("one", {"n": 1}, {"attempts": 2, "backoff": 60_000})
        second = await queue.add("two", {"n": 2})
        job = await worker.getNextJob("token-1")
        assert job is not None and job.name == "one" and await job.isActive()
        assert active.events["active"][0][0].id == job.id
        nxt = await job.moveToFailed(ValueError("later"), "token-1", True)
        assert await job.isDelayed()
        assert job.attemptsMade == 1 and job.failedReason == "later"
        assert nxt is not None and nxt[1] == second.id and nxt[0]["name"] == "two"
        taken = await Job.fromId(queue, second.id or "")
        assert taken is not None
        assert await taken.moveToCompleted("ok", "token-1") is None
        assert await taken.isCompleted() and taken.returnvalue == "ok"
        assert await worker.getNextJob("token-2", {"block": False}) is None
    finally:
        await worker.close(force=True)
        await queue.close()


async def test_flow_children_before_parent(opts: dict[str, str], queue_name: str) -> None:
    parents, children = f"{queue_name}-parents", f"{queue_name}-children"
    flow = FlowProducer(opts)
    done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def parent(job: Job, token: str) -> str:
        done.set_result(await job.getChildrenValues())
        return "parent done"

    async def child(job: Job, token: str) -> int:
        return int(job.data["n"]) * 10

    workers = [Worker(parents, parent, opts), Worker(children, child, opts)]
    try:
        tree = await flow.add(
            {
                "name": "report",
                "queueName": parents,
                "data": {},
                "children": [
                    {"name": "part", "queueName": children, "data": {"n": n}} for n in (1, 2)
                ],
            },
            {"queuesOptions": {children: {"defaultJobOptions": {"attempts": 3}}}},
        )
        assert tree is not None
        assert tree["job"].id and tree["job"].name == "report"
        assert [node["job"].opts["attempts"] for node in tree["children"]] == [3, 3]
        values = await asyncio.wait_for(done, 10)
        assert sorted(values.values()) == [10, 20]
    finally:
        for worker in workers:
            await worker.close()
        await flow.close()
    assert await flow.add({"name": "late", "queueName": parents}) is None


async def test_queue_events_args_and_job_channel(opts: dict[str, str], queue_name: str) -> None:
    events = QueueEvents(queue_name, {**opts, "lastEventId": "0"})
    queue = Queue(queue_name, opts)
    seen: list[tuple[dict[str, Any], str]] = []
    added = Recorder(events, "added")
    try:
        job = await queue.add("hello", {"x": 1})
        events.on(f"completed:{job.id}", lambda args, event_id: seen.append((args, event_id)))
        worker = Worker(
            queue_name, lambda job, token: asyncio.sleep(0, {"ok": job.data["x"]}), opts
        )
        try:
            await eventually(lambda: seen, timeout=10)
        finally:
            await worker.close()
        args, event_id = seen[0]
        assert args["jobId"] == job.id and args["returnvalue"] == {"ok": 1}
        assert isinstance(event_id, str) and event_id
        [(added_args, _)] = await added.wait("added")
        assert (added_args["jobId"], added_args["name"]) == (job.id, "hello")
    finally:
        await events.close()
        await events.close()
        await queue.close()
    assert events.closed


async def test_job_schedulers(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    try:
        job = await queue.upsertJobScheduler(
            "tick",
            {"every": 60_000},
            job_name="tick-job",
            job_data={"a": 1},
            opts={"attempts": 2},
        )
        assert job is not None and job.id is not None and job.id.startswith("repeat:tick:")
        assert await queue.isJobScheduler("tick")
        scheduler = await queue.getJobScheduler("tick")
        assert scheduler is not None
        assert (scheduler["key"], scheduler["name"], scheduler["every"]) == (
            "tick",
            "tick-job",
            60_000,
        )
        assert scheduler["template"] == {"data": {"a": 1}, "opts": {"attempts": 2}}
        assert await queue.getJobSchedulersCount() == 1
        assert (
            await queue.upsertJobScheduler("spent", {"every": 10, "limit": 1, "count": 1}) is None
        )
        with pytest.raises(ValueError):
            await queue.upsertJobScheduler("both", {"every": 10, "pattern": "* * * * *"})
        assert await queue.removeJobScheduler("tick") == 0
        assert await queue.removeJobScheduler("tick") == 1
        assert await queue.getJobSchedulers() == []
    finally:
        await queue.close()


async def test_abort_signal_cancels_a_job(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def process(job: Job, token: str, signal: AbortSignal) -> str:
        started.set_result(job.id or "")
        await signal.wait()
        raise AbortError(signal.reason)

    worker = Worker(queue_name, process, opts)
    failed = Recorder(worker, "failed")
    try:
        await queue.add("long", {})
        job_id = await asyncio.wait_for(started, 10)
        assert not worker.cancelJob("no-such-job")
        assert worker.cancelJob(job_id, "user asked")
        [(job, error)] = await failed.wait("failed")
        assert isinstance(error, AbortError) and error.reason == "user asked"
        assert job.failedReason == "user asked"
    finally:
        await worker.close()
        await queue.close()


async def test_deduplication(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    try:
        first = await queue.add("a", {"v": 1}, {"deduplication": {"id": "same"}})
        second = await queue.add("a", {"v": 2}, {"deduplication": {"id": "same"}})
        other = await queue.add("a", {"v": 3}, {"deduplication": {"id": "other"}})
        assert first.id == second.id != other.id
        assert await queue.getDeduplicationJobId("same") == first.id
        assert len(await queue.getJobs(["waiting"])) == 2
    finally:
        await queue.close()


async def test_empty_queue_name_is_a_queue(opts: dict[str, str]) -> None:
    """The `bullmq` package accepts "" as a queue name (psyq's own API refuses it)."""
    queue = Queue("", opts)
    try:
        job = await queue.add("x", {"n": 1})
        stored = await queue.getJob(job.id or "")
        assert stored is not None and stored.data == {"n": 1}
        # as the store names the queue: `bull:` (BullMQ's Redis form), `` on Postgres
        adapter = await queue.backend.adapter()
        wanted = "" if adapter.key_prefix is None else "bull:"
        assert job.queueQualifiedName == wanted
    finally:
        await queue.obliterate(force=True)
        await queue.close()


async def test_worker_pause_and_resume(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    seen: list[int] = []

    async def process(job: Job, token: str) -> None:
        seen.append(job.data["n"])

    worker = Worker(queue_name, process, opts)
    events = Recorder(worker, "completed", "paused", "resumed")
    try:
        await queue.add("a", {"n": 1})
        await events.wait("completed")
        await worker.pause()
        assert worker.isPaused() and events.events["paused"] == [()]
        await queue.add("b", {"n": 2})
        assert await queue.getJobCounts("waiting") == {"waiting": 1}
        assert seen == [1]
        worker.resume()
        await events.wait("completed", 2)
        assert seen == [1, 2] and events.events["resumed"] == [()]
    finally:
        await worker.close()
        await queue.close()


async def test_job_state_helpers_and_logs(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    worker = Worker(queue_name, None, opts)
    try:
        job = await queue.add("a", {})
        assert await job.isInList("wait") and not await job.isInZSet("delayed")
        assert await Job.addJobLog(queue, job.id or "", "one") == 1
        assert await job.log("two") == 2
        assert (await queue.getJobLogs(job.id or ""))["logs"] == ["one", "two"]
        taken = await worker.moveToActive("tok")
        assert taken is not None and taken.id == job.id and await taken.isInList("active")
        assert await worker.moveToActive("tok2") is None
        await taken.moveToCompleted(None, "tok")
        assert await taken.isInZSet("completed")
    finally:
        await worker.close(force=True)
        await queue.close()


async def test_forced_close_leaves_the_job_to_the_stall_check(
    opts: dict[str, str], queue_name: str
) -> None:
    """As in `bullmq`, close(force=True) does not hand the job back: its lock expires and
    another worker's stall check recovers it (emitting `stalled` with the job id)."""
    queue = Queue(queue_name, opts)
    started = asyncio.Event()

    async def hang(job: Job, token: str) -> None:
        started.set()
        await asyncio.Event().wait()

    first = Worker(queue_name, hang, {**opts, "lockDuration": 500})
    second: Worker | None = None
    try:
        job = await queue.add("stuck", {})
        await asyncio.wait_for(started.wait(), 10)
        await first.close(force=True)
        assert await queue.getJobState(job.id or "") == "active"
        options = {**opts, "lockDuration": 500, "stalledInterval": 300}
        second = Worker(queue_name, lambda job, token: asyncio.sleep(0, "recovered"), options)
        events = Recorder(second, "stalled", "completed")
        [(job_id,)] = await events.wait("stalled", timeout=10)
        [(done, result)] = await events.wait("completed", timeout=10)
        assert job_id == job.id == done.id and result == "recovered"
    finally:
        if second is not None:
            await second.close()
        await queue.close()


async def test_worker_options_not_applied_yet_are_said_so(
    opts: dict[str, str], queue_name: str
) -> None:
    with pytest.warns(UserWarning, match=r"useWorkerThreads=True is not applied.*Sandbox"):
        worker = Worker(queue_name, None, {**opts, "useWorkerThreads": True})
    await worker.close(force=True)


async def test_worker_wait_until_ready_resolves_with_its_connection(
    opts: dict[str, str], queue_name: str
) -> None:
    """BullMQ's `await worker.waitUntilReady()`: the connection is open after it (on Redis
    it resolves with the client, which answers; elsewhere with None)."""
    worker = Worker(queue_name, None, opts)
    try:
        client = await worker.waitUntilReady()
        if opts["connection"].startswith("redis"):
            assert client is worker.redisConnection and await client.ping()
        else:
            assert client is None
    finally:
        await worker.close()
