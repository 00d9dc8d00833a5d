"""The interop matrix's cases: each feature once, run both ways (one side produces, the
other processes), each side reading back what the other wrote.

A case is `async def case(m: Matrix) -> None` registered with `@case("feature")`. It asserts
what the harness itself needs (a plain `assert`: a broken case fails its test) and notes
every way the two sides disagree with `m.expect(ok, difference)`: the case's outcome is ✓,
or its differences joined. test_matrix.py compares each outcome with the committed
matrix.json, from which docs/interop.md is rendered (render.py)."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import fresh_name
from tests.interop.sides import PREFIX
from tests.polling import eventually

FINAL = ("completed", "failed")
PENDING = ["delayed", "waiting", "prioritized"]
Case = Callable[["Matrix"], Awaitable[None]]
CASES: dict[str, Case] = {}


async def _within(condition: Callable[[], Awaitable[bool]], timeout: float) -> None:
    """Poll `condition` until it holds or `timeout` seconds pass, failing neither way: the
    case then notes what it sees with `m.expect` (the sides differ; the harness is fine)."""
    with contextlib.suppress(AssertionError):
        await eventually(condition, timeout=timeout, interval=0.02)


async def _events_within(
    side: Any, handle: int, enough: Callable[[list[dict[str, Any]]], bool], timeout: float = 5
) -> list[dict[str, Any]]:
    """The events a side's QueueEvents read, once `enough` of them (`timeout` s at most)."""
    events: list[dict[str, Any]] = []

    async def read() -> bool:
        events[:] = await side.events(handle)
        return enough(events)

    await _within(read, timeout)
    return events


def case(feature: str) -> Callable[[Case], Case]:
    def register(function: Case) -> Case:
        assert feature not in CASES, feature
        CASES[feature] = function
        return function

    return register


@dataclass
class Matrix:
    """One case run: `producer` adds, `consumer` processes (both are sides.py sides), on
    `store` ("redis" or "postgres")."""

    producer: Any
    consumer: Any
    store: str = "redis"
    differences: list[str] = field(default_factory=list)
    queue: str = field(default_factory=lambda: fresh_name("mx"))

    @property
    def sides(self) -> tuple[Any, Any]:
        return self.producer, self.consumer

    def key(self, queue: str, job_id: str) -> str:
        """How the store keys a job (parent and child keys): `bull:<queue>:<id>` on Redis,
        `<queue>:<id>` in BullMQ's Postgres layout (no prefix)."""
        return f"{PREFIX}:{queue}:{job_id}" if self.store == "redis" else f"{queue}:{job_id}"

    def expect_keys(self, seen: Any, wanted: Any, difference: str) -> bool:
        """`expect(seen == wanted, difference)` for values holding job keys (a key, or a
        dict keyed by them): a difference only in the key's form is named as such."""
        if seen != wanted and self.store != "redis" and _unprefixed(seen) == wanted:
            difference = (
                "psyq names jobs `bull:<queue>:<id>`, BullMQ's Postgres backend `<queue>:<id>`"
            )
        return self.expect(seen == wanted, difference)

    def expect(self, ok: bool, difference: str) -> bool:
        if not ok and difference not in self.differences:
            self.differences.append(difference)
        return ok

    def outcome(self) -> str:
        return "; ".join(self.differences) if self.differences else "✓"

    async def run(
        self, ids: Iterable[str], queue: str | None = None, timeout: float = 15, **opts: Any
    ) -> dict[str, dict[str, Any]]:
        """Let the consumer's worker (with `opts`) process until the jobs `ids` are finished;
        returns them as the producer reads them (the consumer reads the same: checked)."""
        queue = queue or self.queue
        worker = await self.consumer.start_worker(queue, **opts)
        try:
            jobs = await self.finished(ids, queue, timeout)
        finally:
            errors = await self.consumer.stop_worker(worker)
        self.expect(not errors, f"{self.consumer.name}'s worker reports errors")
        await self.same_view(queue, jobs)
        return jobs

    async def finished(
        self, ids: Iterable[str], queue: str | None = None, timeout: float = 15
    ) -> dict[str, dict[str, Any]]:
        name, wanted = queue or self.queue, list(ids)
        jobs: dict[str, Any] = {}

        async def all_final() -> bool:
            jobs.update({i: await self.producer.job(name, i) for i in wanted})
            return all(job is not None and job["state"] in FINAL for job in jobs.values())

        try:
            await eventually(all_final, f"jobs {wanted} finished", timeout, interval=0.02)
        except AssertionError as failed:
            states = {i: job and job["state"] for i, job in jobs.items()}
            raise AssertionError(f"{failed}: {states}") from None
        return jobs

    async def same_view(self, queue: str, jobs: Mapping[str, Mapping[str, Any]]) -> None:
        """Both sides read each job the same (the fields a user reads)."""
        for job_id, ours in jobs.items():
            theirs = await self.consumer.job(queue, job_id)
            for name in _READ_BACK:
                mine, other = ours.get(name), (theirs or {}).get(name)
                self.expect(
                    mine == other,
                    f"{self.producer.name} and {self.consumer.name} read `{name}` differently",
                )


def _unprefixed(keys: Any) -> Any:
    """A job key, or a dict keyed by job keys, with `bull:` dropped from each key."""
    if isinstance(keys, str):
        return keys.removeprefix(f"{PREFIX}:")
    if isinstance(keys, dict):
        return {_unprefixed(key): value for key, value in keys.items()}
    return keys


_READ_BACK = (
    "state", "name", "data", "returnvalue", "failedReason", "attemptsMade", "progress", "logs",
    "delay", "priority", "timestamp", "processedOn", "finishedOn", "parentKey",
)  # fmt: skip


def steps(*items: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"steps": list(items), **extra}


# A job that takes a few ms, so that jobs run one after another have distinct processedOn.
TICK = {"steps": [{"sleep": 3}]}


# ---------------------------------------------------------------------------- job basics
@case("data, name and return value")
async def plain(m: Matrix) -> None:
    value = {"list": [1, "two", None, 3.5], "nested": {"ok": True}, "text": "é✓"}
    job_id = await m.producer.add(m.queue, "plain", steps({"return": value}, n=1))
    [job] = (await m.run([job_id])).values()
    m.expect(job["state"] == "completed", "the job does not complete")
    m.expect(job["returnvalue"] == value, "the return value reads back changed")
    m.expect(job["data"]["n"] == 1, "the data reads back changed")
    m.expect(job["attemptsMade"] == 1, f"attemptsMade is {job['attemptsMade']}, not 1")


@case("priority")
async def priority(m: Matrix) -> None:
    ids = [await m.producer.add(m.queue, f"p{p}", TICK, {"priority": p}) for p in (3, 1, 2)]
    ids.append(await m.producer.add(m.queue, "none", TICK))
    jobs = await m.run(ids)
    order = [job["name"] for job in sorted(jobs.values(), key=lambda j: j["processedOn"])]
    m.expect(order == ["none", "p1", "p2", "p3"], f"processed in the order {order}")
    m.expect(jobs[ids[0]]["priority"] == 3, "the priority reads back changed")


@case("lifo")
async def lifo(m: Matrix) -> None:
    ids = [await m.producer.add(m.queue, n, TICK) for n in ("a", "b")]
    ids.append(await m.producer.add(m.queue, "c", TICK, {"lifo": True}))
    jobs = await m.run(ids)
    order = [job["name"] for job in sorted(jobs.values(), key=lambda j: j["processedOn"])]
    m.expect(order == ["c", "a", "b"], f"processed in the order {order}")


@case("delay")
async def delay(m: Matrix) -> None:
    job_id = await m.producer.add(m.queue, "later", {}, {"delay": 300})
    seen = await m.consumer.job(m.queue, job_id)
    m.expect(seen is not None and seen["state"] == "delayed", "not delayed for the other side")
    m.expect(seen is not None and seen["delay"] == 300, "the delay reads back changed")
    [job] = (await m.run([job_id])).values()
    m.expect(job["processedOn"] - job["timestamp"] >= 300, "runs before its delay")


@case("timestamp")
async def timestamp(m: Matrix) -> None:
    stamp = int(time.time() * 1000) - 60_000
    job_id = await m.producer.add(m.queue, "stamped", {}, {"timestamp": stamp})
    [job] = (await m.run([job_id])).values()
    m.expect(job["timestamp"] == stamp, "the timestamp option is not kept")


@case("jobId (and adding it again)")
async def custom_id(m: Matrix) -> None:
    job_id = await m.producer.add(m.queue, "mine", {"v": 1}, {"jobId": "order-7"})
    again = await m.consumer.add(m.queue, "mine", {"v": 2}, {"jobId": "order-7"})
    m.expect(job_id == again == "order-7", "the id is not kept")
    [job] = (await m.run([job_id])).values()
    m.expect(job["data"] == {"v": 1}, "adding an existing id again changed the job")
    counts = await m.producer.counts(m.queue, "completed", "waiting")
    added = (counts["completed"], counts["waiting"]) != (1, 0)
    m.expect(not added, "adding an existing id again adds a job")


@case("telemetry metadata (trace context)")
async def telemetry(m: Matrix) -> None:
    trace = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    job_id = await m.producer.add(m.queue, "traced", {}, {"telemetry": {"metadata": trace}})
    [job] = (await m.run([job_id])).values()
    theirs = await m.consumer.job(m.queue, job_id)
    for side, seen in ((m.producer, job), (m.consumer, theirs)):
        kept = (seen or {}).get("opts", {}).get("telemetry", {}).get("metadata")
        m.expect(kept == trace, f"{side.name} reads the trace context changed")


@case("sizeLimit")
async def size_limit(m: Matrix) -> None:
    job_id = await m.producer.add(m.queue, "small", {"text": "x" * 10}, {"sizeLimit": 1000})
    [job] = (await m.run([job_id])).values()
    m.expect(job["opts"].get("sizeLimit") == 1000, "the sizeLimit option is not kept")
    for side in m.sides:
        refused = False
        try:
            await side.add(m.queue, "big", {"text": "x" * 2000}, {"sizeLimit": 1000})
        except Exception:
            refused = True
        m.expect(refused, f"{side.name} adds data over its sizeLimit")


# ---------------------------------------------------------------------------- retries
@case("attempts with fixed backoff")
async def fixed_backoff(m: Matrix) -> None:
    opts = {"attempts": 3, "backoff": {"type": "fixed", "delay": 50}}
    job_id = await m.producer.add(m.queue, "flaky", steps({"failUntil": 3}), opts)
    [job] = (await m.run([job_id])).values()
    m.expect(job["state"] == "completed", "does not complete on its last attempt")
    m.expect(job["attemptsMade"] == 3, f"attemptsMade is {job['attemptsMade']}, not 3")


@case("attempts with exponential backoff")
async def exponential_backoff(m: Matrix) -> None:
    opts = {"attempts": 3, "backoff": {"type": "exponential", "delay": 40}}
    job_id = await m.producer.add(m.queue, "flaky", steps({"failUntil": 3}), opts)
    started = time.monotonic()
    [job] = (await m.run([job_id])).values()
    m.expect(job["state"] == "completed", "does not complete on its last attempt")
    m.expect(job["attemptsMade"] == 3, f"attemptsMade is {job['attemptsMade']}, not 3")
    m.expect(time.monotonic() - started >= 0.12, "retries sooner than 40 + 80 ms")


@case("attempts with a custom backoff strategy, and jitter")
async def custom_backoff(m: Matrix) -> None:
    custom = {"attempts": 3, "backoff": {"type": "linear", "delay": 30}}
    jitter = {"attempts": 2, "backoff": {"type": "fixed", "delay": 40, "jitter": 0.5}}
    ids = [
        await m.producer.add(m.queue, "custom", steps({"failUntil": 3}), custom),
        await m.producer.add(m.queue, "jitter", steps({"failUntil": 2}), jitter),
    ]
    jobs = await m.run(ids, customBackoff={"type": "linear", "ms": 30})
    for job in jobs.values():
        m.expect(job["state"] == "completed", f"the {job['name']} job does not complete")
    m.expect(jobs[ids[0]]["attemptsMade"] == 3, "the custom strategy's retries are miscounted")


@case("failed reason and stack trace (attempts exhausted)")
async def failed(m: Matrix) -> None:
    job_id = await m.producer.add(m.queue, "bad", steps({"fail": "no way"}), {"attempts": 2})
    [job] = (await m.run([job_id])).values()
    m.expect(job["state"] == "failed", "does not fail")
    m.expect(job["failedReason"] == "no way", "the failed reason reads back changed")
    m.expect(job["attemptsMade"] == 2, f"attemptsMade is {job['attemptsMade']}, not 2")
    stack = job["stacktrace"]
    m.expect(len(stack) == 2, f"{len(stack)} stack traces kept for 2 attempts")
    m.expect(all("no way" in trace for trace in stack), "a stack trace lacks the error message")


@case("UnrecoverableError")
async def unrecoverable(m: Matrix) -> None:
    job_id = await m.producer.add(
        m.queue, "doomed", steps({"unrecoverable": "give up"}), {"attempts": 5}
    )
    [job] = (await m.run([job_id])).values()
    m.expect(job["state"] == "failed", "does not fail")
    m.expect(job["attemptsMade"] == 1, f"attemptsMade is {job['attemptsMade']}, not 1")
    m.expect(job["failedReason"] == "give up", "the failed reason reads back changed")


@case("DelayedError (move_to_delayed)")
async def delayed_error(m: Matrix) -> None:
    job_id = await m.producer.add(
        m.queue, "again", steps({"delay": 200, "once": True}, {"return": "later"})
    )
    [job] = (await m.run([job_id])).values()
    m.expect(job["returnvalue"] == "later", "does not complete after its delay")
    m.expect(job["data"].get("done0") is True, "the data update is lost")
    m.expect(job["attemptsMade"] in (0, 1), f"attemptsMade is {job['attemptsMade']}")


@case("rateLimit from the processor (RateLimitError)")
async def rate_limit_error(m: Matrix) -> None:
    job_id = await m.producer.add(
        m.queue, "limited", steps({"rateLimit": 200, "once": True}, {"return": "done"})
    )
    [job] = (await m.run([job_id])).values()
    m.expect(job["returnvalue"] == "done", "does not complete after the limit")
    m.expect(job["attemptsMade"] == 1, f"attemptsMade is {job['attemptsMade']}, not 1")
    started = job["attemptsStarted"]  # BullMQ counts every move to active
    m.expect(started == 2, f"attemptsStarted is {started}, not 2 (the limited start counts)")


# ---------------------------------------------------------------------------- retention
@case("removeOnComplete / removeOnFail: true")
async def remove_true(m: Matrix) -> None:
    done = await m.producer.add(m.queue, "ok", {}, {"removeOnComplete": True})
    bad = await m.producer.add(m.queue, "bad", steps({"fail": "x"}), {"removeOnFail": True})
    last = await m.producer.add(m.queue, "kept", {})
    await m.run([last])
    for side in m.sides:
        m.expect(await side.job(m.queue, done) is None, "a completed job is kept")
        m.expect(await side.job(m.queue, bad) is None, "a failed job is kept")


@case("removeOnComplete / removeOnFail: count and age")
async def remove_count(m: Matrix) -> None:
    ids = [await m.producer.add(m.queue, f"j{i}", {}, {"removeOnComplete": 1}) for i in range(3)]
    opts = {"removeOnFail": {"age": 3600, "count": 1}}
    ids += [await m.producer.add(m.queue, f"f{i}", steps({"fail": "x"}), opts) for i in range(2)]
    last = await m.producer.add(m.queue, "kept", {})
    await m.run([last])
    counts = await m.consumer.counts(m.queue, "completed", "failed")
    m.expect(counts == {"completed": 2, "failed": 1}, f"keeps {counts}")


@case("keepLogs")
async def keep_logs(m: Matrix) -> None:
    logs = [{"log": f"row {i}"} for i in range(4)]
    job_id = await m.producer.add(m.queue, "chatty", steps(*logs), {"keepLogs": 2})
    [job] = (await m.run([job_id])).values()
    m.expect(job["logs"] == ["row 2", "row 3"], f"keeps the logs {job['logs']}")


@case("progress and logs")
async def progress_and_logs(m: Matrix) -> None:
    job_id = await m.producer.add(
        m.queue, "busy", steps({"progress": 40}, {"log": "half"}, {"progress": {"pct": 90}})
    )
    [job] = (await m.run([job_id])).values()
    m.expect(job["progress"] == {"pct": 90}, "the progress reads back changed")
    m.expect(job["logs"] == ["half"], "the logs read back changed")


# ---------------------------------------------------------------------------- deduplication
async def _deduplicated_events(
    m: Matrix, listeners: list[tuple[Any, int]], count: int
) -> list[list[dict[str, Any]]]:
    """The `deduplicated` events each side's QueueEvents read (waiting for `count` of them,
    5 s at most); the listeners are stopped."""

    def deduplicated(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e["args"] for e in events if e["event"] == "deduplicated"]

    views = []
    for side, handle in listeners:
        events = await _events_within(side, handle, lambda got: len(deduplicated(got)) >= count)
        views.append(deduplicated(events))
        await side.stop_events(handle)
    return views


@case("deduplication (simple and ttl)")
async def dedup(m: Matrix) -> None:
    listeners = [(side, await side.start_events(m.queue)) for side in m.sides]
    first = await m.producer.add(m.queue, "once", {}, {"deduplication": {"id": "d1"}})
    again = await m.consumer.add(m.queue, "once", {}, {"deduplication": {"id": "d1"}})
    m.expect(again == first, "the other side adds a second job under the same id")
    views = await _deduplicated_events(m, listeners, 1)
    for (side, _), seen in zip(listeners, views, strict=True):
        refused = seen[0].get("deduplicatedJobId") if len(seen) == 1 else None
        m.expect(
            len(seen) == 1 and seen[0]["jobId"] == first and seen[0]["deduplicationId"] == "d1"
            and refused not in (None, "", first),
            f"{side.name}'s QueueEvents `deduplicated` is {seen}",
        )  # fmt: skip
    owner = await m.consumer.deduplication_job_id(m.queue, "d1")
    m.expect(owner == first, "the other side does not find the deduplicated job")
    ttl = await m.producer.add(m.queue, "ttl", {}, {"deduplication": {"id": "d2", "ttl": 60_000}})
    m.expect(
        await m.consumer.add(m.queue, "ttl", {}, {"deduplication": {"id": "d2", "ttl": 60_000}})
        == ttl,
        "a ttl deduplication is not seen by the other side",
    )
    await m.run([first, ttl])
    m.expect(await m.producer.counts(m.queue, "completed") == {"completed": 2}, "extra jobs ran")


@case("deduplication with extend and replace")
async def dedup_replace(m: Matrix) -> None:
    opts = {
        "delay": 60_000,
        "deduplication": {"id": "r", "ttl": 60_000, "extend": True, "replace": True},
    }
    listeners = [(side, await side.start_events(m.queue)) for side in m.sides]
    old = await m.producer.add(m.queue, "old", {"v": 1}, opts)
    new = await m.consumer.add(m.queue, "new", {"v": 2}, opts)
    m.expect(new != old, "replace keeps the delayed job")
    m.expect(await m.producer.job(m.queue, old) is None, "the replaced job is not removed")
    owner = await m.producer.deduplication_job_id(m.queue, "r")
    m.expect(owner == new, "the deduplication key does not name the replacing job")
    wanted = {"jobId": new, "deduplicationId": "r", "deduplicatedJobId": old}
    views = await _deduplicated_events(m, listeners, 1)
    for (side, _), seen in zip(listeners, views, strict=True):
        m.expect(seen == [wanted], f"{side.name}'s QueueEvents `deduplicated` is {seen}")


# ---------------------------------------------------------------------------- flows
def _tree(m: Matrix, children_queue: str, child_opts: Mapping[str, Any], parent_steps: Any) -> Any:
    kids = [
        {"name": "ok", "queueName": children_queue, "data": steps({"return": 5})},
        {
            "name": "bad",
            "queueName": children_queue,
            "data": steps({"fail": "child broke"}),
            "opts": dict(child_opts),
        },
    ]
    return {"name": "parent", "queueName": m.queue, "data": parent_steps, "children": kids}


async def _flow(m: Matrix, child_opts: Mapping[str, Any], parent_steps: Any) -> dict[str, Any]:
    children = fresh_name("mx-kids")
    tree = await m.producer.add_flow(_tree(m, children, child_opts, parent_steps))
    kid_ids = [child["id"] for child in tree["children"]]
    kids = await m.consumer.start_worker(children)
    try:
        await m.finished(kid_ids, children)
        worker = await m.consumer.start_worker(m.queue)
        parent: Any = None

        async def parent_final() -> bool:
            nonlocal parent
            parent = await m.producer.job(m.queue, tree["id"])
            return parent["state"] in FINAL

        try:
            await _within(parent_final, 10)
        finally:
            await m.consumer.stop_worker(worker)
    finally:
        await m.consumer.stop_worker(kids)
    await m.same_view(m.queue, {tree["id"]: parent})
    return {"parent": parent, "children": children, "kids": kid_ids}


@case("flow across queues (children's values)")
async def flow_values(m: Matrix) -> None:
    children = fresh_name("mx-kids")
    kids = [{"name": "k", "queueName": children, "data": steps({"return": n})} for n in (1, 2, 3)]
    tree = {
        "name": "parent",
        "queueName": m.queue,
        "data": steps({"childrenValues": True}),
        "children": kids,
    }
    added = await m.producer.add_flow(tree)
    kid_ids = [child["id"] for child in added["children"]]
    worker = await m.consumer.start_worker(children)
    await m.finished(kid_ids, children)
    await m.consumer.stop_worker(worker)
    [parent] = (await m.run([added["id"]])).values()
    expected = {m.key(children, i): n for i, n in zip(kid_ids, (1, 2, 3), strict=True)}
    m.expect_keys(parent["returnvalue"], expected, "the parent reads its children's values changed")
    m.expect(parent["parentKey"] is None, "the parent has a parent key")
    kid = await m.producer.job(children, kid_ids[0])
    m.expect_keys(kid["parentKey"], m.key(m.queue, added["id"]), "a child's parentKey differs")


@case("failParentOnFailure")
async def fail_parent(m: Matrix) -> None:
    got = await _flow(m, {"failParentOnFailure": True}, steps({"return": "ran"}))
    m.expect(got["parent"]["state"] == "failed", f"the parent is {got['parent']['state']}")


@case("ignoreDependencyOnFailure")
async def ignore_dependency(m: Matrix) -> None:
    got = await _flow(m, {"ignoreDependencyOnFailure": True}, steps({"ignoredFailures": True}))
    parent = got["parent"]
    m.expect(parent["state"] == "completed", f"the parent is {parent['state']}")
    key = m.key(got["children"], got["kids"][1])
    ignored = parent["returnvalue"]  # BullMQ's getFailedChildrenValues, psyq's "ignored" deps
    m.expect_keys(
        ignored, {key: "child broke"}, "the parent reads its ignored child failure changed"
    )


@case("continueParentOnFailure")
async def continue_parent(m: Matrix) -> None:
    got = await _flow(m, {"continueParentOnFailure": True}, steps({"return": "went on"}))
    parent = got["parent"]
    m.expect(parent["returnvalue"] == "went on", f"the parent is {parent['state']}")


@case("removeDependencyOnFailure")
async def remove_dependency(m: Matrix) -> None:
    got = await _flow(m, {"removeDependencyOnFailure": True}, steps({"childrenValues": True}))
    parent = got["parent"]
    key = m.key(got["children"], got["kids"][0])
    m.expect_keys(parent["returnvalue"], {key: 5}, f"the parent is {parent['state']}")


@case("WaitingChildrenError (a child added with the parent option)")
async def waiting_children(m: Matrix) -> None:
    children = fresh_name("mx-kids")
    child = {"queue": children, "name": "kid", "data": steps({"return": 7})}
    job_id = await m.producer.add(
        m.queue, "parent", steps({"child": child, "once": True}, {"childrenValues": True})
    )
    kids = await m.consumer.start_worker(children)
    try:
        [parent] = (await m.run([job_id])).values()
    finally:
        await m.consumer.stop_worker(kids)
    values = parent["returnvalue"]
    m.expect(isinstance(values, dict) and list(values.values()) == [7], "children's values lost")


# ---------------------------------------------------------------------------- limits, control
@case("global concurrency")
async def global_concurrency(m: Matrix) -> None:
    await m.producer.set_global_concurrency(m.queue, 1)
    ids = [await m.producer.add(m.queue, f"s{i}", steps({"sleep": 80})) for i in range(3)]
    jobs = sorted((await m.run(ids, concurrency=3)).values(), key=lambda j: j["processedOn"])
    overlap = any(b["processedOn"] < a["finishedOn"] for a, b in itertools.pairwise(jobs))
    m.expect(not overlap, "jobs overlap past the global concurrency of 1")


@case("global rate limit")
async def global_rate_limit(m: Matrix) -> None:
    await m.producer.set_global_rate_limit(m.queue, 1, 250)
    ids = [await m.producer.add(m.queue, f"r{i}", {}) for i in range(3)]
    jobs = sorted((await m.run(ids)).values(), key=lambda j: j["processedOn"])
    gaps = [b["processedOn"] - a["processedOn"] for a, b in itertools.pairwise(jobs)]
    m.expect(all(gap >= 200 for gap in gaps), "runs faster than the global rate limit")


@case("worker limiter (shared limiter key)")
async def worker_limiter(m: Matrix) -> None:
    ids = [await m.producer.add(m.queue, f"l{i}", {}) for i in range(3)]
    jobs = sorted(
        (await m.run(ids, limiter={"max": 1, "duration": 250})).values(),
        key=lambda j: j["processedOn"],
    )
    gaps = [b["processedOn"] - a["processedOn"] for a, b in itertools.pairwise(jobs)]
    m.expect(all(gap >= 200 for gap in gaps), "runs faster than the limiter")


@case("pause and resume")
async def pause_resume(m: Matrix) -> None:
    await m.producer.pause(m.queue)
    m.expect(await m.consumer.is_paused(m.queue), "the other side does not see the pause")
    job_id = await m.producer.add(m.queue, "held", {})
    worker = await m.consumer.start_worker(m.queue)
    try:
        seen = await m.consumer.job(m.queue, job_id)
        m.expect(seen["state"] == "waiting", f"a job added while paused is {seen['state']}")
        await m.consumer.resume(m.queue)
        m.expect(not await m.producer.is_paused(m.queue), "the resume is not seen")
        await m.finished([job_id])
    finally:
        await m.consumer.stop_worker(worker)


@case("QueueEvents (added, active, progress, completed, failed, delayed)")
async def queue_events(m: Matrix) -> None:
    listeners = [(side, await side.start_events(m.queue)) for side in m.sides]
    ok = await m.producer.add(m.queue, "ok", steps({"progress": 50}, {"return": 1}))
    bad = await m.producer.add(m.queue, "bad", steps({"fail": "nope"}))
    later = await m.producer.add(m.queue, "later", {}, {"delay": 100})
    await m.run([ok, bad, later])
    wanted = {
        ("added", ok), ("active", ok), ("progress", ok), ("completed", ok), ("failed", bad),
        ("delayed", later), ("completed", later),
    }  # fmt: skip

    def keys(events: list[dict[str, Any]]) -> set[tuple[str, Any]]:
        return {(e["event"], e["args"].get("jobId")) for e in events}

    views = []
    for side, handle in listeners:
        events = await _events_within(side, handle, lambda read: wanted <= keys(read))
        got = keys(events)
        m.expect(wanted <= got, f"{side.name}'s QueueEvents miss {sorted(wanted - got)}")
        views.append({(e["event"], e["args"].get("jobId")): e["args"] for e in events})
    for key in sorted(wanted):
        a, b = (view.get(key, {}) for view in views)
        m.expect(a == b, f"QueueEvents `{key[0]}` arguments differ between the sides")
    for side, handle in listeners:
        await side.stop_events(handle)


@case("retry a failed job from the other side")
async def retry(m: Matrix) -> None:
    job_id = await m.producer.add(m.queue, "twice", steps({"fail": "first", "once": True}))
    await m.run([job_id])
    await m.producer.retry(m.queue, job_id)
    [job] = (await m.run([job_id])).values()
    m.expect(job["state"] == "completed", f"the retried job is {job['state']}")


@case("promote a delayed job from the other side")
async def promote(m: Matrix) -> None:
    job_id = await m.producer.add(m.queue, "far", {}, {"delay": 600_000})
    await m.consumer.promote(m.queue, job_id)
    [job] = (await m.run([job_id])).values()
    m.expect(job["state"] == "completed", "the promoted job does not run")


@case("remove a job from the other side")
async def remove(m: Matrix) -> None:
    job_id = await m.producer.add(m.queue, "gone", {}, {"delay": 600_000})
    await m.consumer.remove(m.queue, job_id)
    m.expect(await m.producer.job(m.queue, job_id) is None, "the removed job is still there")
    m.expect(await m.producer.counts(m.queue, "delayed") == {"delayed": 0}, "still counted")


@case("change priority, change delay, update data from the other side")
async def changes(m: Matrix) -> None:
    low = await m.producer.add(m.queue, "low", TICK, {"priority": 9})
    high = await m.producer.add(m.queue, "high", TICK, {"priority": 5})
    await m.consumer.change_priority(m.queue, low, 1)
    later = await m.producer.add(m.queue, "later", {}, {"delay": 600_000})
    await m.consumer.change_delay(m.queue, later, 50)
    await m.consumer.update_data(m.queue, high, {"steps": [{"return": "new data"}]})
    jobs = await m.run([low, high, later])
    m.expect(jobs[low]["priority"] == 1, "the changed priority reads back changed")
    m.expect(
        jobs[low]["processedOn"] <= jobs[high]["processedOn"], "the priority change is ignored"
    )
    m.expect(jobs[later]["state"] == "completed", "the shortened delay is ignored")
    m.expect(jobs[high]["returnvalue"] == "new data", "the updated data is not what runs")


@case("drain, clean, obliterate from the other side")
async def cleanup(m: Matrix) -> None:
    ids = [await m.producer.add(m.queue, f"c{i}", {}) for i in range(2)]
    await m.run(ids)
    await m.producer.add(m.queue, "waiting", {})
    await m.producer.add(m.queue, "delayed", {}, {"delay": 600_000})
    await m.consumer.drain(m.queue, True)
    counts = await m.producer.counts(m.queue, "waiting", "delayed", "completed")
    m.expect(counts["waiting"] == counts["delayed"] == 0, "drain leaves jobs")
    cleaned = await m.consumer.clean(m.queue, 0, 10, "completed")
    m.expect(sorted(cleaned) == sorted(ids), "clean removes other jobs")
    m.expect(await m.producer.counts(m.queue, "completed") == {"completed": 0}, "clean keeps jobs")
    await m.producer.add(m.queue, "left", {})
    await m.consumer.obliterate(m.queue)
    left = (await m.producer.counts(m.queue, "waiting"))["waiting"]  # BullMQ 5 adds "paused"
    m.expect(left == 0, "obliterate leaves jobs")


@case("getWorkers lists the other side's workers")
async def get_workers(m: Matrix) -> None:
    worker = await m.consumer.start_worker(m.queue)
    try:
        job_id = await m.producer.add(m.queue, "w", {})
        await m.finished([job_id])
        seen: int = 0

        async def listed() -> bool:
            nonlocal seen
            seen = await m.producer.workers(m.queue)
            return seen >= 1

        await _within(listed, 5)
        m.expect(seen >= 1, f"{m.producer.name} does not list {m.consumer.name}'s worker")
    finally:
        await m.consumer.stop_worker(worker)


@case("getters and counts")
async def getters(m: Matrix) -> None:
    await m.producer.add(m.queue, "w", {})
    await m.producer.add(m.queue, "p", {}, {"priority": 2})
    await m.producer.add(m.queue, "d", {}, {"delay": 600_000})
    await m.producer.add_bulk(m.queue, [{"name": "b1", "data": {}}, {"name": "b2", "data": {}}])
    kinds = ["waiting", "prioritized", "delayed", "active", "completed", "failed", "paused"]
    a, b = [await side.counts(m.queue, *kinds) for side in m.sides]
    m.expect(a == b, "the counts differ between the sides")
    m.expect(a["waiting"] == 3 and a["prioritized"] == 1 and a["delayed"] == 1, f"counts {a}")
    for kinds_ in (["waiting"], ["prioritized"], ["delayed"], PENDING):
        lists = [await side.get_jobs(m.queue, kinds_) for side in m.sides]
        m.expect(lists[0] == lists[1], f"get_jobs({kinds_}) lists differ between the sides")


# ---------------------------------------------------------------------------- schedulers
async def _scheduled(m: Matrix, count: int, until_done: bool = False) -> list[str]:
    """The ids of the runs the consumer's worker completed: at least `count`, and with
    `until_done` all of them (none left pending or running)."""
    worker = await m.consumer.start_worker(m.queue)
    ids: list[str] = []

    async def completed() -> bool:
        ids[:] = await m.producer.get_jobs(m.queue, ["completed"])
        left = await m.producer.get_jobs(m.queue, [*PENDING, "active"]) if until_done else []
        return len(ids) >= count and not left

    try:
        what = f"{count} runs completed" + (", none left" if until_done else "")
        await eventually(completed, what, 15, interval=0.02)
    finally:
        errors = await m.consumer.stop_worker(worker)
    m.expect(not errors, f"{m.consumer.name}'s worker reports errors")
    return sorted(ids, key=lambda job_id: int(job_id.rsplit(":", 1)[1]))


async def _fresh_runs(side: Any, queue: str) -> list[str]:
    """The pending runs no worker has started: a closing worker may hand back a run it
    took (it waits again, started once), beside the scheduler's next run."""
    fresh = []
    for job_id in await side.get_jobs(queue, PENDING):
        job = await side.job(queue, job_id)
        if job is not None and not job["processedOn"]:
            fresh.append(job_id)
    return fresh


def _millis(ids: list[str]) -> list[int]:
    return [int(job_id.rsplit(":", 1)[1]) for job_id in ids]


@case("job scheduler: every")
async def scheduler_every(m: Matrix) -> None:
    template = {"name": "tick", "data": {"n": 1}, "opts": {"attempts": 2}}
    first = await m.producer.upsert_scheduler(m.queue, "tick", {"every": 300}, template)
    assert first is not None and first.startswith("repeat:tick:")
    ids = await _scheduled(m, 3)
    m.expect(all(b - a >= 300 for a, b in itertools.pairwise(_millis(ids))), "runs too close")
    for side in m.sides:
        job = await side.job(m.queue, ids[-1])
        m.expect(job["data"] == {"n": 1} and job["name"] == "tick", "a run's data or name changed")
        m.expect(job["opts"].get("attempts") == 2, "a run loses the template's options")
        m.expect(job["repeatJobKey"] == "tick", "a run does not name its scheduler")
        listed = await side.schedulers(m.queue)
        m.expect(
            len(listed) == 1 and listed[0]["every"] == 300 and listed[0]["iterationCount"] >= 4,
            f"{side.name} lists the scheduler differently",
        )
        pending = await _fresh_runs(side, m.queue)
        m.expect(len(pending) == 1, f"{len(pending)} pending runs, not 1")


@case("job scheduler: cron pattern with tz, limit, immediately")
async def scheduler_cron(m: Matrix) -> None:
    repeat = {"pattern": "* * * * * *", "tz": "Europe/Berlin", "limit": 2, "immediately": True}
    template = {"name": "cron", "data": steps({"return": "ok"})}
    await m.producer.upsert_scheduler(m.queue, "cron", repeat, template)
    ids = await _scheduled(m, 2)
    runs = _millis(ids)
    m.expect(runs[1] % 1000 == 0 and runs[1] > runs[0], "the second run is not on a whole second")
    for side in m.sides:
        m.expect(len(await side.get_jobs(m.queue, ["completed"])) == 2, "runs past its limit")
        m.expect(await side.get_jobs(m.queue, PENDING) == [], "a run is pending past the limit")
        [listed] = await side.schedulers(m.queue)
        m.expect(
            (listed["pattern"], listed["tz"], listed["limit"])
            == (repeat["pattern"], "Europe/Berlin", 2),
            f"{side.name} lists the scheduler differently",
        )


@case("job scheduler: cron `?` and @-aliases; both sides compute the same next run")
async def scheduler_cron_forms(m: Matrix) -> None:
    repeat = {"pattern": "* * * ? * *", "limit": 2, "immediately": True}
    await m.producer.upsert_scheduler(m.queue, "q", repeat, {"name": "q"})
    ids = await _scheduled(m, 2)
    m.expect(_millis(ids)[1] % 1000 == 0, "a `?` pattern's second run is off the second")
    patterns = [("@hourly", None), ("@weekly", None), ("30 2 * * *", "America/New_York")]
    for number, (pattern, tz) in enumerate(patterns):
        spec = {"pattern": pattern, **({"tz": tz} if tz else {})}
        key = f"same{number}"
        firsts = [
            await side.upsert_scheduler(m.queue, key, spec, {"name": key}) for side in m.sides
        ]
        m.expect(firsts[0] == firsts[1], f"the sides compute different next runs for {pattern!r}")


@case("repeat add option (BullMQ 5's legacy repeatable jobs)")
async def legacy_repeat(m: Matrix) -> None:
    opts = {"repeat": {"every": 300}, "attempts": 2}
    try:
        job_id = await m.producer.add(m.queue, "legacy", {"n": 7}, opts)
    except Exception:
        m.expect(False, f"{m.producer.name} refuses the `repeat` option: use a job scheduler")
        return
    if not job_id.startswith("repeat:"):  # BullMQ 6 adds a plain job (it dropped the option)
        await m.run([job_id])
        return
    ids = await _scheduled(m, 3)  # BullMQ 5 made a repeatable job: its runs go on
    for side in m.sides:
        for run_id in ids:
            run = await side.job(m.queue, run_id)
            m.expect(run["data"] == {"n": 7}, "a repeatable job's run loses its data")
            m.expect(run["opts"].get("attempts") == 2, "a repeatable job's run loses its options")


@case("job scheduler: startDate, endDate, template options")
async def scheduler_dates(m: Matrix) -> None:
    start = int(time.time() * 1000) + 500
    end = start + 1500
    repeat = {"every": 300, "startDate": start, "endDate": end}
    opts = {"attempts": 3, "backoff": {"type": "fixed", "delay": 10}, "priority": 4}
    template = {"name": "dated", "data": steps({"failUntil": 2}, {"log": "ran"}), "opts": opts}
    await m.producer.upsert_scheduler(m.queue, "dated", repeat, template)
    ids = await _scheduled(m, 2, until_done=True)
    runs = _millis(ids)
    m.expect(runs[0] >= start, "runs before its startDate")
    # BullMQ's worker checks endDate against the run that starts, not the one it adds, so
    # with `every` its last run may fall one interval past the end (whether it does depends
    # on timing); psyq's never does. Beyond that one interval is a difference.
    m.expect(runs[-1] <= end + 300, "runs more than one interval after its endDate")
    for side in m.sides:
        job = await side.job(m.queue, ids[-1])
        m.expect(job["attemptsMade"] == 2 and job["priority"] == 4, "template options lost")
        m.expect(job["logs"] == ["ran"], "a run's logs differ")


@case("job scheduler: upsert, list, remove across")
async def scheduler_admin(m: Matrix) -> None:
    first = await m.producer.upsert_scheduler(
        m.queue, "y", {"pattern": "0 0 1 1 *"}, {"name": "yearly", "data": {"k": "v"}}
    )
    [listed] = await m.consumer.schedulers(m.queue)
    m.expect(listed["pattern"] == "0 0 1 1 *", "the other side lists it differently")
    m.expect(listed["next"] == int(str(first).rsplit(":", 1)[1]), "`next` differs")
    data = listed.get("template", {}).get("data")
    m.expect(data in ({"k": "v"}, '{"k":"v"}'), "the template data reads back changed")
    second = await m.consumer.upsert_scheduler(
        m.queue, "y", {"pattern": "0 0 1 6 *"}, {"name": "june"}
    )
    for side in m.sides:
        m.expect(await side.get_jobs(m.queue, PENDING) == [second], "the replaced run stays")
        [listed] = await side.schedulers(m.queue)
        m.expect(listed["name"] == "june", "the replaced scheduler is listed as before")
    await m.producer.remove_scheduler(m.queue, "y")
    for side in m.sides:
        m.expect(await side.schedulers(m.queue) == [], "the removed scheduler is listed")
        m.expect(await side.get_jobs(m.queue, PENDING) == [], "the removed scheduler's run stays")


@case("job scheduler: workers of both sides on one queue")
async def scheduler_mixed(m: Matrix) -> None:
    await m.producer.upsert_scheduler(m.queue, "mix", {"every": 150}, {"name": "mix"})
    workers = [(side, await side.start_worker(m.queue)) for side in m.sides]
    ids: list[str] = []

    async def six() -> bool:
        ids[:] = await m.producer.get_jobs(m.queue, ["completed"])
        return len(ids) >= 6

    try:
        await eventually(six, "6 runs completed", 15, interval=0.02)
    finally:
        for side, handle in workers:
            m.expect(not await side.stop_worker(handle), f"{side.name}'s worker reports errors")
    runs = sorted(_millis(ids))
    m.expect(all(b - a >= 150 for a, b in itertools.pairwise(runs)), "runs closer than every")
    pending = await _fresh_runs(m.consumer, m.queue)
    m.expect(len(pending) == 1, f"{len(pending)} pending runs, not 1")


@case("job scheduler: removing its pending run is refused")
async def scheduler_run_removal(m: Matrix) -> None:
    first = await m.producer.upsert_scheduler(m.queue, "keep", {"pattern": "0 0 1 1 *"}, {})
    try:
        refused = not await m.consumer.remove(m.queue, first)  # psyq: False
    except Exception:
        refused = True  # Node BullMQ: an error (-8)
    kept = await m.producer.job(m.queue, first) is not None
    m.expect(
        refused and kept,
        f"{m.consumer.name} removes a scheduler's pending run (BullMQ refuses: error -8, remove "
        "the scheduler instead), leaving the scheduler without runs",
    )
