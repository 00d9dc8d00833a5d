"""Node BullMQ 6's calls that the `bullmq` package for Python lacks, in psyq.compat.bullmq,
on every backend: each asserts what Node BullMQ 6 does (its src/classes, read for the
semantics), with Node's names and argument shapes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from psyq.compat.bullmq import (
    AbortController,
    FlowProducer,
    Job,
    JobScheduler,
    Queue,
    QueueEvents,
    Worker,
)
from tests.conformance.conftest import Recorder
from tests.polling import eventually


@pytest.fixture
async def queue(opts: dict[str, str], queue_name: str) -> AsyncIterator[Queue]:
    q = Queue(queue_name, opts)
    yield q
    await q.close()


@pytest.fixture
async def flow(opts: dict[str, str]) -> AsyncIterator[FlowProducer]:
    producer = FlowProducer(opts)
    yield producer
    await producer.close()


def _names(tree: dict[str, Any]) -> Any:
    """A flow tree as (name, [children...]) pairs."""
    return (tree["job"].name, [_names(child) for child in tree.get("children", ())])


def _other(queue_name: str, part: str) -> str:
    return f"{queue_name}-{part}-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------------- FlowProducer
async def test_get_flow_reads_a_tree_back_as_node_does(flow: FlowProducer, queue_name: str) -> None:
    steps = _other(queue_name, "steps")
    leaf = {"name": "leaf", "queueName": steps, "data": {}}
    added = await flow.add(
        {
            "name": "root",
            "queueName": queue_name,
            "data": {"n": 1},
            "children": [{"name": "mid", "queueName": steps, "data": {}, "children": [leaf]}],
        }
    )
    assert added is not None
    root_id = added["job"].id
    tree = await flow.getFlow({"id": root_id, "queueName": queue_name})
    assert tree is not None
    assert _names(tree) == ("root", [("mid", [("leaf", [])])])
    assert (tree["job"].id, tree["job"].data) == (root_id, {"n": 1})
    assert "children" not in tree["children"][0]["children"][0]  # a leaf has none, as Node
    assert tree["children"][0]["job"].queueName == steps
    # depth counts levels, the job itself the first (Node's getNode: depth - 1 per level)
    shallow = await flow.getFlow({"id": root_id, "queueName": queue_name, "depth": 2})
    assert shallow is not None and _names(shallow) == ("root", [("mid", [])])
    alone = await flow.getFlow({"id": root_id, "queueName": queue_name, "depth": 1})
    assert alone is not None and "children" not in alone
    assert await flow.getFlow({"id": "missing", "queueName": queue_name}) is None
    with pytest.raises(ValueError, match="queueName"):
        await flow.getFlow({"id": root_id})


async def test_get_flow_caps_the_children_with_max_children(
    flow: FlowProducer, queue_name: str
) -> None:
    kids = [{"name": f"c{i}", "queueName": queue_name, "data": {}} for i in range(3)]
    added = await flow.add({"name": "p", "queueName": queue_name, "data": {}, "children": kids})
    assert added is not None
    tree = await flow.getFlow({"id": added["job"].id, "queueName": queue_name, "maxChildren": 2})
    assert tree is not None and len(tree["children"]) == 2


async def test_flow_producer_is_an_event_emitter_with_node_handles(
    flow: FlowProducer, queue_name: str
) -> None:
    errors: list[BaseException] = []
    flow.on("error", errors.append)
    flow.emit("error", RuntimeError("x"))
    assert [str(e) for e in errors] == ["x"]
    await flow.waitUntilReady()
    assert flow.getBackend() is flow.backend
    assert flow.toKey(queue_name, "wait") == f"bull:{queue_name}:wait"
    assert not flow.closing


# ---------------------------------------------------------------------- Job: flows
async def _parent_with_children(
    opts: dict[str, str], flow: FlowProducer, queue_name: str
) -> tuple[Job, dict[str, str]]:
    """A parent with a completed child, a failed ignored one and one not processed."""
    done, bad, idle = (_other(queue_name, part) for part in ("done", "bad", "idle"))
    added = await flow.add(
        {
            "name": "parent",
            "queueName": queue_name,
            "data": {},
            "children": [
                {"name": "ok", "queueName": done, "data": {}},
                {"name": "no", "queueName": bad, "opts": {"ignoreDependencyOnFailure": True}},
                {"name": "later", "queueName": idle, "data": {}},
            ],
        }
    )
    assert added is not None
    keys = {child["job"].name: child["job"].core.key for child in added["children"]}

    async def boom(job: Job, token: str) -> None:
        raise RuntimeError("boom")

    workers = [
        Worker(done, lambda job, token: asyncio.sleep(0, "fine"), opts),
        Worker(bad, boom, opts),
    ]
    parent: Job = added["job"]
    try:
        await eventually(lambda: _counts_are(parent, {"processed": 1, "ignored": 1}), timeout=10)
    finally:
        for worker in workers:
            await worker.close()
    return parent, keys


async def _counts_are(job: Job, wanted: dict[str, int]) -> bool:
    counts = await job.getDependenciesCount(dict.fromkeys(wanted, True))
    return counts == wanted


async def test_dependencies_count_and_ignored_failures(
    opts: dict[str, str], flow: FlowProducer, queue_name: str
) -> None:
    parent, keys = await _parent_with_children(opts, flow, queue_name)
    assert await parent.getDependenciesCount() == {
        "processed": 1,
        "unprocessed": 1,
        "ignored": 1,
        "failed": 0,
    }
    assert await parent.getDependenciesCount({"unprocessed": True, "failed": False}) == {
        "unprocessed": 1
    }
    assert await parent.getIgnoredChildrenFailures() == {keys["no"]: "boom"}


async def test_queue_get_dependencies_pages_processed_and_pending(
    opts: dict[str, str], flow: FlowProducer, queue: Queue, queue_name: str
) -> None:
    parent, keys = await _parent_with_children(opts, flow, queue_name)
    processed = await queue.getDependencies(str(parent.id), "processed", 0, -1)
    assert processed["total"] == 1
    assert processed["items"] == [{"id": keys["ok"], "v": "fine"}]  # the child's key, as Node
    assert [job.name for job in processed["jobs"]] == ["ok"]
    pending = await queue.getDependencies(str(parent.id), "pending", 0, -1)
    assert (pending["total"], [job.name for job in pending["jobs"]]) == (1, ["later"])
    with pytest.raises(ValueError, match="'failed'"):
        await queue.getDependencies(str(parent.id), "failed", 0, -1)


async def test_remove_unprocessed_children_removes_only_those(
    opts: dict[str, str], flow: FlowProducer, queue_name: str
) -> None:
    parent, keys = await _parent_with_children(opts, flow, queue_name)
    idle_queue = Queue(parent._child_of(keys["later"])[0], opts)
    try:
        later_id = keys["later"].rpartition(":")[2]
        assert await idle_queue.getJob(later_id) is not None
        await parent.removeUnprocessedChildren()
        assert await idle_queue.getJob(later_id) is None
        counts = await parent.getDependenciesCount()
        assert (counts["unprocessed"], counts["processed"], counts["ignored"]) == (0, 1, 1)
    finally:
        await idle_queue.close()


# ---------------------------------------------------------------------- Job: others
async def test_job_create_and_create_bulk_add_jobs(queue: Queue) -> None:
    job = await Job.create(queue, "paint", {"color": "red"}, {"jobId": "car-1"})
    assert job.id == "car-1" and job.queueName == queue.name
    stored = await queue.getJob("car-1")
    assert stored is not None and stored.data == {"color": "red"}
    bulk = await Job.createBulk(queue, [{"name": "a", "data": 1}, {"name": "b", "data": 2}])
    assert [j.name for j in bulk] == ["a", "b"]
    assert await queue.count() == 3


async def test_remove_deduplication_key_only_while_it_names_the_job(queue: Queue) -> None:
    first = await queue.add("sync", {}, {"deduplication": {"id": "user-7"}})
    assert first.deduplicationId == "user-7"
    assert await first.removeDeduplicationKey() is True
    assert await queue.getDeduplicationJobId("user-7") is None
    second = await queue.add("sync", {}, {"deduplication": {"id": "user-7"}})
    assert second.id != first.id
    assert await first.removeDeduplicationKey() is False  # the key names the second now
    assert await queue.getDeduplicationJobId("user-7") == second.id
    plain = await queue.add("plain", {})
    assert await plain.removeDeduplicationKey() is False


async def test_move_to_wait_hands_an_active_job_back(
    opts: dict[str, str], queue: Queue, queue_name: str
) -> None:
    added = await queue.add("call", {"n": 1})
    worker = Worker(queue_name, None, opts)
    try:
        job = await worker.getNextJob("token-1")
        assert job is not None and job.id == added.id
        assert await job.moveToWait("token-1") == 0  # no rate limit: ttl 0
        assert await queue.getJobState(str(added.id)) == "waiting"
        again = await worker.getNextJob("token-2")
        assert again is not None and again.id == added.id
        assert again.attemptsMade == 0  # handed back without using an attempt
        await worker.rateLimit(60_000)
        assert await again.moveToWait("token-2") > 0  # Node returns the limit's ttl
        assert await queue.getJobState(str(added.id)) == "waiting"
    finally:
        await worker.close()


async def test_job_json_forms_and_logs(queue: Queue) -> None:
    job = await queue.add("paint", {"color": "red"}, {"attempts": 2, "deduplication": {"id": "d"}})
    assert await job.log("one") == 1 and await job.log("two") == 2
    await job.clearLogs(1)
    assert (await queue.getJobLogs(str(job.id)))["logs"] == ["two"]
    await job.clearLogs()
    assert (await queue.getJobLogs(str(job.id)))["count"] == 0
    raw = job.asJSON()
    assert (raw["id"], raw["name"], raw["data"]) == (job.id, "paint", '{"color":"red"}')
    assert Job.optsFromJSON(raw["opts"])["attempts"] == 2
    assert Job.optsFromJSON('{"de":{"id":"d"},"kl":5}') == {
        "deduplication": {"id": "d"},
        "keepLogs": 5,
    }
    fields = job.toJSON()
    assert (fields["name"], fields["data"], fields["deduplicationId"]) == ("paint", job.data, "d")
    assert job.prefix == "bull" and job.processedBy is None


async def test_processed_by_names_the_worker(
    opts: dict[str, str], queue: Queue, queue_name: str
) -> None:
    await queue.add("a", {}, {"removeOnComplete": False})
    worker = Worker(queue_name, lambda job, token: asyncio.sleep(0, 1), {**opts, "name": "w1"})
    try:
        [(job, _)] = await Recorder(worker, "completed").wait("completed")
    finally:
        await worker.close()
    stored = await queue.getJob(str(job.id))
    assert stored is not None and stored.processedBy in ("w1", None)


# ---------------------------------------------------------------------- Queue
async def test_queue_node_calls(opts: dict[str, str], queue: Queue, queue_name: str) -> None:
    job = await queue.add("a", {}, {"removeOnComplete": False})
    progress = Recorder(queue, "progress")
    assert await queue.addJobLog(str(job.id), "row", 0) == 1
    await queue.updateJobProgress(str(job.id), 42)
    stored = await queue.getJob(str(job.id))
    assert stored is not None and stored.progress == 42
    assert progress.events["progress"] in ([], [(str(job.id), 42)])
    assert await queue.getRanges(["waiting"], 0, -1) == [job.id]
    assert queue.defaultJobOptions == {}
    assert isinstance(queue.token, str) and queue.token == queue.token
    assert queue.getBackend() is queue.backend
    assert not await queue.isMaxed()
    await queue.setGlobalConcurrency(1)
    assert not await queue.isMaxed()
    worker = Worker(queue_name, None, opts)
    try:
        assert await worker.getNextJob("t") is not None
        assert await queue.isMaxed()  # one active of a global concurrency of one
    finally:
        await worker.close()
    await queue.setGlobalRateLimit(5, 1000)
    await queue.pause()
    meta = await queue.getMeta()
    assert (meta["paused"], meta["concurrency"], meta["max"], meta["duration"]) == (
        True,
        1,
        5,
        1000,
    )
    first = await queue.add("d", {}, {"deduplication": {"id": "k"}})
    assert await queue.removeDebounceKey("k") == 1
    assert await queue.getDeduplicationJobId("k") is None and first.id


async def test_queue_disconnect_closes(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    await queue.add("a", {})
    assert not queue.closing
    await queue.disconnect()
    assert queue.closing


# ---------------------------------------------------------------------- Worker
async def test_start_stalled_check_timer_recovers_a_manual_job(
    opts: dict[str, str], queue: Queue, queue_name: str
) -> None:
    """A worker without a processor checks for stalled jobs once startStalledCheckTimer is
    called: a job fetched and never settled goes back to waiting when its lock expires."""
    added = await queue.add("a", {})
    manual = {**opts, "lockDuration": 200, "stalledInterval": 100, "maxStalledCount": 2}
    taker = Worker(queue_name, None, manual)
    checker = Worker(queue_name, None, manual)
    stalled = Recorder(checker, "stalled")
    try:
        assert await taker.getNextJob("t1") is not None
        await checker.startStalledCheckTimer()
        await checker.startStalledCheckTimer()  # a second call while it runs adds none
        assert checker.listener_count("closed") == 1
        await stalled.wait("stalled", timeout=10)
        assert stalled.events["stalled"][0][0] == added.id
        assert await queue.getJobState(str(added.id)) == "waiting"
    finally:
        await taker.close()
        await checker.close()


async def test_start_stalled_check_timer_respects_skip_stalled_check(
    opts: dict[str, str], queue_name: str
) -> None:
    worker = Worker(queue_name, None, {**opts, "skipStalledCheck": True})
    try:
        await worker.startStalledCheckTimer()  # no check is started
        assert worker.listener_count("closed") == 0
    finally:
        await worker.close()


async def test_worker_node_calls(opts: dict[str, str], queue: Queue, queue_name: str) -> None:
    added = await queue.add("a", {})
    worker = Worker(queue_name, None, opts)
    try:
        assert worker.toKey("wait") == f"{worker.qualifiedName}:wait"
        assert worker.getBackend() is worker.backend
        job = await worker.getNextJob("tok")
        assert job is not None and job.id == added.id
        assert await worker.extendJobLocks([str(job.id)], ["tok"], 30_000) == []
        assert await worker.extendJobLocks([str(job.id)], ["other"], 30_000) == [job.id]
        with pytest.raises(ValueError, match="tokens"):
            await worker.extendJobLocks([str(job.id)], [], 1000)
        controller = AbortController()
        asyncio.get_running_loop().call_soon(controller.abort)
        await worker.delay(60_000, controller)  # returns once aborted
        await worker.delay(1)
        await worker.delay()  # Node's default: 100 ms
    finally:
        await worker.close()


async def test_processor_signal_add_event_listener(
    opts: dict[str, str], queue: Queue, queue_name: str
) -> None:
    """A Node processor's `signal.addEventListener('abort', ...)` is called when the job
    is cancelled, with an event whose target is the signal."""
    heard: list[Any] = []
    started = asyncio.Event()

    async def process(job: Job, token: str, signal: Any) -> str:
        signal.addEventListener("abort", lambda event: heard.append(event.target.reason))
        signal.addEventListener("abort", lambda event: heard.append(event.type), {"once": True})
        started.set()
        await signal.wait()
        return "stopped"

    await queue.add("long", {})
    worker = Worker(queue_name, process, opts)
    done = Recorder(worker, "completed")
    try:
        await asyncio.wait_for(started.wait(), 10)
        [job] = await queue.getActive()
        assert worker.cancelJob(str(job.id), "user asked")
        await done.wait("completed")
        assert heard == ["user asked", "abort"]
    finally:
        await worker.close()


def test_abort_signal_event_target() -> None:
    controller = AbortController()
    signal = controller.signal
    calls: list[str] = []

    def listener(event: Any) -> None:
        calls.append("listener")

    signal.addEventListener("abort", listener)
    signal.addEventListener("abort", listener)  # once, however often it is added
    signal.addEventListener("other", lambda event: calls.append("other"))
    removed = lambda event: calls.append("removed")  # noqa: E731
    signal.addEventListener("abort", removed)
    signal.removeEventListener("abort", removed)
    signal.onabort = lambda event: calls.append("onabort")
    controller.abort("why")
    controller.abort("again")  # a second abort fires nothing
    assert calls == ["onabort", "listener"]


# ---------------------------------------------------------------------- events, schedulers
async def test_queue_events_and_job_scheduler_node_handles(
    opts: dict[str, str], queue: Queue, queue_name: str
) -> None:
    events = QueueEvents(queue_name, {**opts, "autorun": False})
    try:
        assert events.toKey("events") == f"bull:{queue_name}:events"
        assert events.getBackend() is events.backend
    finally:
        await events.disconnect()
    scheduler = JobScheduler(queue)
    await scheduler.waitUntilReady()
    assert (scheduler.name, scheduler.qualifiedName) == (queue.name, queue.qualifiedName)
    assert scheduler.toKey("repeat") == f"{queue.qualifiedName}:repeat"
    assert scheduler.getBackend() is queue.backend and not scheduler.closing
    heard: list[Any] = []
    queue.on("custom", heard.append)
    assert scheduler.emit("custom", 1) and heard == [1]
    await scheduler.upsertJobScheduler("s", {"every": 60_000}, "n", {}, {})
    await scheduler.close()  # closes nothing: the queue still answers
    assert await scheduler.getSchedulersCount() == 1


async def test_job_get_dependencies_pages_as_node(
    opts: dict[str, str], flow: FlowProducer, queue_name: str
) -> None:
    parent, keys = await _parent_with_children(opts, flow, queue_name)
    whole = await parent.getDependencies()
    assert set(whole) >= {"processed", "unprocessed", "ignored"}
    page = await parent.getDependencies(
        {"processed": {"count": 5}, "unprocessed": {"cursor": 0, "count": 1}, "ignored": True}
    )
    assert page == {
        "processed": {keys["ok"]: "fine"},
        "nextProcessedCursor": 0,
        "unprocessed": [keys["later"]],
        "nextUnprocessedCursor": 0,
        "ignored": {keys["no"]: "boom"},
        "nextIgnoredCursor": 0,
    }


async def test_job_get_dependencies_cursor_walks_the_children(
    flow: FlowProducer, queue_name: str
) -> None:
    kids = [{"name": f"c{i}", "queueName": queue_name, "data": {}} for i in range(3)]
    added = await flow.add({"name": "p", "queueName": queue_name, "data": {}, "children": kids})
    assert added is not None
    parent: Job = added["job"]
    seen: list[str] = []
    cursor = 0
    while True:
        page = await parent.getDependencies({"unprocessed": {"cursor": cursor, "count": 2}})
        seen += page["unprocessed"]
        cursor = page["nextUnprocessedCursor"]
        if cursor == 0:
            break
    assert sorted(seen) == sorted(child["job"].core.key for child in added["children"])


async def test_export_prometheus_metrics_as_node_writes_them(queue: Queue) -> None:
    await queue.add("a", {})
    text = await queue.exportPrometheusMetrics({"env": 'p"1'})
    lines = text.split("\n")
    assert lines[:2] == [
        "# HELP bullmq_job_count Number of jobs in the queue by state",
        "# TYPE bullmq_job_count gauge",
    ]
    assert f'bullmq_job_count{{queue="{queue.name}", state="waiting", env="p\\"1"}} 1' in lines
    completed = (await queue.getMetrics("completed"))["meta"]["count"]
    assert f'bullmq_job_completed_total{{queue="{queue.name}", env="p\\"1"}} {completed}' in lines
    assert "# TYPE bullmq_job_failed_total counter" in lines
    assert await queue.recordJobCountsMetric("waiting") == {"waiting": 1}


async def test_obliterate_takes_nodes_options(queue: Queue) -> None:
    await queue.add("a", {})
    await queue.obliterate({"force": False, "count": 10})
    assert await queue.count() == 0


# ---------------------------------------------------------------------- options
async def test_node_options_the_layer_takes_without_effect(
    opts: dict[str, str], queue_name: str
) -> None:
    """The options node_surface lists as taken: a Queue, Worker, QueueEvents and
    FlowProducer given them work as without."""
    shared = {"blockingConnection": True, "skipVersionCheck": True, "skipWaitingForReady": True}
    queue = Queue(queue_name, {**opts, **shared, "skipMetasUpdate": True})
    events = QueueEvents(queue_name, {**opts, **shared, "autorun": False})
    flow = FlowProducer({**opts, **shared})
    worker = Worker(
        queue_name,
        lambda job, token: asyncio.sleep(0, "ok"),
        {**opts, **shared, "runRetryDelay": 5},
    )
    done = Recorder(worker, "completed")
    try:
        await queue.add("a", {})
        await flow.add({"name": "b", "queueName": queue_name, "data": {}})
        await done.wait("completed", count=2)
    finally:
        await worker.close()
        await flow.close()
        await events.close()
        await queue.close()


@pytest.mark.parametrize("option", ["keepLastIfActive", "reschedule"])
async def test_deduplication_options_psyq_lacks_are_refused(queue: Queue, option: str) -> None:
    """Not silently ignored: the add fails naming the option, and nothing is written."""
    with pytest.raises(ValueError, match=option):
        await queue.add("a", {}, {"deduplication": {"id": "d", option: True}})
    assert await queue.count() == 0


async def test_max_started_attempts_fails_a_job_started_too_often(
    opts: dict[str, str], queue: Queue, queue_name: str
) -> None:
    """Node: a job whose attemptsStarted exceeds maxStartedAttempts fails with
    UnrecoverableError('job started more than allowable limit'), its processor not run."""
    runs: list[int] = []

    async def flaky(job: Job, token: str) -> None:
        runs.append(job.attemptsStarted)
        raise RuntimeError("try again")

    added = await queue.add("a", {}, {"attempts": 5})
    worker = Worker(queue_name, flaky, {**opts, "maxStartedAttempts": 1})
    failed = Recorder(worker, "failed")
    try:
        await failed.wait("failed", count=2, timeout=10)
    finally:
        await worker.close()
    stored = await queue.getJob(str(added.id))
    assert stored is not None
    assert stored.failedReason == "job started more than allowable limit"
    assert runs == [1]  # the second start did not run the processor
    assert len(failed.events["failed"]) == 2


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_max_started_attempts_must_be_a_whole_number(opts: dict[str, str], limit: Any) -> None:
    with pytest.raises(ValueError, match="maxStartedAttempts"):
        Worker("q", None, {**opts, "maxStartedAttempts": limit})


async def test_upsert_job_scheduler_takes_nodes_template(queue: Queue) -> None:
    """Node: `upsertJobScheduler(id, repeatOpts, {name, data, opts})`."""
    job = await queue.upsertJobScheduler(
        "report",
        {"every": 60_000},
        {"name": "daily", "data": {"kind": "sales"}, "opts": {"attempts": 2}},
    )
    assert job is not None and (job.name, job.data) == ("daily", {"kind": "sales"})
    scheduler = await queue.getJobScheduler("report")
    assert scheduler is not None and scheduler["name"] == "daily"
    assert scheduler["template"]["opts"]["attempts"] == 2
    with pytest.raises(ValueError, match="not both"):
        await queue.upsertJobScheduler("x", {"every": 1000}, {"name": "n"}, job_data={})
    with pytest.raises(ValueError, match="repeat"):
        await queue.upsertJobScheduler("x", {"every": 1000}, {"name": "n", "repeat": {}})
    assert await queue.getJobSchedulersCount() == 1


async def test_job_scheduler_takes_nodes_override_options(queue: Queue) -> None:
    scheduler = JobScheduler(queue)
    await scheduler.upsertJobScheduler("s", {"every": 60_000}, "first", {}, {})
    kept = await scheduler.upsertJobScheduler(
        "s", {"every": 60_000}, "second", {}, {}, {"override": False, "producerId": "p1"}
    )
    assert kept is None  # an existing scheduler is kept without override
    found = await scheduler.getScheduler("s")
    assert found is not None and found["name"] == "first"


async def test_get_delayed_count_before_a_timestamp(queue: Queue) -> None:
    soon = await queue.add("soon", {}, {"delay": 60_000})
    await queue.add("later", {}, {"delay": 600_000})
    due = soon.timestamp + soon.delay
    assert await queue.getDelayedCount() == 2
    assert await queue.getDelayedCount(due + 1) == 1
    assert await queue.getDelayedCount(due) == 0  # strictly before, as Node
    with pytest.raises(ValueError, match="timestamp"):
        await queue.getDelayedCount(1.5)  # type: ignore[arg-type]


async def test_get_ranges_reads_two_by_default_as_node(queue: Queue) -> None:
    jobs = [await queue.add(f"j{i}", {}) for i in range(3)]
    assert len(await queue.getRanges(["waiting"])) == 2
    assert sorted(await queue.getRanges("waiting", 0, -1)) == sorted(str(j.id) for j in jobs)


async def test_remove_unprocessed_children_keeps_a_child_being_processed(
    opts: dict[str, str], flow: FlowProducer, queue_name: str
) -> None:
    steps = _other(queue_name, "steps")
    kids = [{"name": f"c{i}", "queueName": steps, "data": {}} for i in range(2)]
    added = await flow.add({"name": "p", "queueName": queue_name, "data": {}, "children": kids})
    assert added is not None
    worker = Worker(steps, None, opts)
    try:
        taken = await worker.getNextJob("tok")
        assert taken is not None
        await added["job"].removeUnprocessedChildren()
        left = await worker.backend.getJobData(str(taken.id))
        assert left is not None  # active: kept, as Node skips locked children
        others = [child["job"] for child in added["children"] if child["job"].id != taken.id]
        assert [await worker.backend.getJobData(str(job.id)) for job in others] == [None]
    finally:
        await worker.close()
