"""Groups (BullMQ Pro's `group: {id}`): virtual queues inside a queue, served round-robin.

Jobs without a group are taken first; grouped jobs rotate over the groups that have work,
FIFO inside a group (or by the group priority: 0 first, then lower numbers). A group's
concurrency and rate limit hold across every worker; a paused, limited or full group never
blocks the others; an empty group leaves nothing behind.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from tests.conftest import fresh_name
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state

pytestmark = pytest.mark.usefixtures("backend_url")


def grouped(group: str, name: str = "j", **extra: Any) -> dict[str, Any]:
    """An add_bulk entry of `group`, its data naming it."""
    return {"name": name, "data": {"g": group}, "opts": {"group": {"id": group, **extra}}}


async def completed_count(queue: psyq.Queue, count: int) -> bool:
    """Whether `count` jobs completed: a worker may settle a job a little after its
    processor returned (a store that batches completions)."""
    return (await queue.get_job_counts("completed"))["completed"] >= count


async def run_in_order(make_worker: WorkerFactory, count: int, **options: Any) -> list[str]:
    """Run a one-slot worker until `count` jobs completed; their names in the order taken."""
    order: list[str] = []
    worker = make_worker(lambda job: order.append(job.name), **options)
    await eventually(lambda: len(order) >= count, f"{count} jobs run", 10)
    await worker.close()
    return order


# ------------------------------------------------------------------ the option
@pytest.mark.parametrize(
    ("group", "named"),
    [
        ({"id": ""}, "group.id"),
        ({"id": ["a"]}, "group.id"),
        ({"id": 1.5}, "group.id"),
        ({"id": True}, "group.id"),
        ({"id": "a\x00b"}, "group.id"),
        ({"id": "x" * 257}, "group.id"),
        ({"id": 2**53}, "group.id"),
        ({"id": "a", "colour": "red"}, "group"),
        ({"id": "a", "maxSize": 0}, "group.maxSize"),
        ({"id": "a", "priority": -1}, "group.priority"),
        ({"id": "a", "priority": 2**21}, "group.priority"),
        ({"priority": 1}, "group"),
        ("tenant", "group"),
    ],
)
async def test_a_bad_group_is_refused_naming_it_and_nothing_is_written(
    queue: psyq.Queue, group: Any, named: str
) -> None:
    with pytest.raises(psyq.InvalidOptionsError) as refused:
        await queue.add("j", {}, group=group)
    assert named in str(refused.value)
    with pytest.raises(psyq.InvalidOptionsError):
        await queue.add_bulk([{"name": "ok"}, {"name": "bad", "opts": {"group": group}}])
    assert await queue.count() == 0


@pytest.mark.parametrize(("option", "value"), [("lifo", True), ("priority", 3)])
async def test_options_a_group_orders_itself_are_refused(
    queue: psyq.Queue, option: str, value: Any
) -> None:
    with pytest.raises(psyq.InvalidOptionsError) as refused:
        await queue.add("j", {}, group={"id": "a"}, **{option: value})
    assert option in str(refused.value)
    assert await queue.count() == 0


async def test_the_group_reads_back_with_its_id_as_text(queue: psyq.Queue) -> None:
    job = await queue.add("j", {}, group={"id": 42, "max_size": 5, "priority": 1})
    assert job.opts["group"] == {"id": "42", "maxSize": 5, "priority": 1}
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.opts["group"] == {"id": "42", "maxSize": 5, "priority": 1}
    assert await queue.get_job_state(job.id) == "waiting"


# ------------------------------------------------------------------ taking
async def test_groups_are_served_round_robin_fifo_inside_each(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add_bulk([grouped("a", name) for name in ("a1", "a2", "a3")])
    await queue.add_bulk([grouped("b", "b1"), grouped("b", "b2"), grouped("c", "c1")])
    order = await run_in_order(make_worker, 6)
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3"]


async def test_jobs_without_a_group_come_first(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add_bulk([grouped("a", "g1"), grouped("b", "g2")])
    await queue.add("plain", {})
    await queue.add("urgent", {}, priority=1)
    order = await run_in_order(make_worker, 4)
    assert order == ["plain", "urgent", "g1", "g2"]


async def test_the_group_priority_orders_a_group(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add_bulk([grouped("a", "p2", priority=2), grouped("a", "p0", priority=0)])
    await queue.add_bulk([grouped("a", "p1", priority=1), grouped("a", "p0-later")])
    assert await queue.get_counts_per_priority_for_group("a", [0, 1, 2, 3]) == {
        "0": 2,
        "1": 1,
        "2": 1,
        "3": 0,
    }
    assert [job.name for job in await queue.get_group_jobs("a")] == [
        "p0",
        "p0-later",
        "p1",
        "p2",
    ]
    assert await run_in_order(make_worker, 4) == ["p0", "p0-later", "p1", "p2"]


async def test_a_delayed_grouped_job_enters_its_group_when_due(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    late = await queue.add("late", {}, group={"id": "a"}, delay=300)
    assert await queue.get_job_state(late.id) == "delayed"
    assert await queue.get_groups_job_count() == 0
    worker = make_worker(lambda job: job.name)
    await wait_state(queue, late.id, "completed")
    await worker.close()


async def test_an_empty_group_leaves_nothing_behind(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add_bulk([grouped("a"), grouped("b"), grouped("b")])
    assert await queue.get_groups_count() == 2
    await run_in_order(make_worker, 3)
    assert await queue.get_groups_count() == 0
    assert await queue.get_groups() == []
    assert await queue.get_groups_job_count() == 0


# ------------------------------------------------------------------ limits
async def test_group_concurrency_holds_across_workers(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    overall = 0

    async def process(job: psyq.Job) -> None:
        nonlocal overall
        group = job.data["g"]
        running[group] += 1
        peak[group] = max(peak[group], running[group])
        overall = max(overall, sum(running.values()))
        await asyncio.sleep(0.03)  # sleep: the job's work, its group's slot held
        running[group] -= 1

    await queue.add_bulk([grouped("a") for _ in range(6)] + [grouped("b") for _ in range(6)])
    workers = [make_worker(process, concurrency=4, group={"concurrency": 1}) for _ in range(2)]
    recs = [Recorder(w, "completed") for w in workers]
    await eventually(lambda: sum(len(r.events["completed"]) for r in recs) >= 12, "12 done", 15)
    assert peak == {"a": 1, "b": 1}
    assert overall == 2  # the two groups ran side by side


async def test_a_group_concurrency_of_its_own_overrides_the_workers(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.set_group_concurrency("a", 3)
    assert await queue.get_group_concurrency("a") == 3
    assert await queue.get_group_concurrency("b") is None
    running = peak = 0

    async def process(job: psyq.Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)  # sleep: the job's work, its slot held
        running -= 1

    await queue.add_bulk([grouped("a") for _ in range(9)])
    worker = make_worker(process, concurrency=8, group={"concurrency": 1})
    rec = Recorder(worker, "completed")
    await rec.wait("completed", 9, timeout=15)
    assert peak == 3
    await queue.set_group_concurrency("a", None)
    assert await queue.get_group_concurrency("a") is None


async def test_group_rate_limit_caps_each_group_and_spares_the_others(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    started: dict[str, list[int]] = {"a": [], "b": []}

    def process(job: psyq.Job) -> None:  # the store's clock: when the take started it
        started[job.data["g"]].append(job.processed_on or 0)

    await queue.add_bulk([grouped("a") for _ in range(6)])
    await queue.set_group_rate_limit("b", 100, 1000)  # b's own limit, over the workers'
    await queue.add_bulk([grouped("b") for _ in range(6)])
    worker = make_worker(process, concurrency=5, group={"limit": {"max": 2, "duration": 400}})
    rec = Recorder(worker, "completed")
    await rec.wait("completed", 12, timeout=15)
    a = sorted(started["a"])
    assert max(sum(1 for t in a if s <= t < s + 400) for s in a) <= 2
    assert a[-1] - a[0] >= 700  # 6 jobs at 2 per 400 ms: three windows
    assert max(started["b"]) < a[-1]  # b, limited only by its own 100/s, finished first


async def test_rate_limit_group_parks_one_group_and_the_job_comes_back(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    tries: Counter[str] = Counter()
    done: list[str] = []
    seen_ttl: list[int] = []
    worker: psyq.Worker

    async def process(job: psyq.Job) -> None:
        tries[job.name] += 1
        if job.name == "a1" and tries["a1"] == 1:
            await worker.rate_limit_group(job, 400)
            seen_ttl.append(await queue.get_group_rate_limit_ttl("a"))
            raise psyq.RateLimitError()
        done.append(job.name)

    await queue.add_bulk([grouped("a", "a1"), grouped("a", "a2"), grouped("b", "b1")])
    worker = make_worker(process)
    await eventually(lambda: len(done) >= 3, "3 done", 10)
    assert done[0] == "b1"  # b ran while a was parked
    assert done[1:] == ["a1", "a2"]  # a1 went back to the head of its group
    assert 0 < seen_ttl[0] <= 400
    await eventually(lambda: completed_count(queue, 3), "3 completed")  # settles may lag
    a1 = [job for job in await queue.get_completed() if job.name == "a1"]
    assert a1[0].attempts_made == 1  # the parked attempt counted no attempt made
    assert await queue.get_group_rate_limit_ttl("a") == 0


# ------------------------------------------------------------------ control
async def test_a_paused_group_waits_and_the_others_run(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    assert await queue.pause_group("a") is True
    assert await queue.pause_group("a") is False
    jobs = await queue.add_bulk([grouped("a", "a1"), grouped("b", "b1")])
    worker = make_worker(lambda job: job.name)
    await wait_state(queue, jobs[1].id, "completed")
    groups = {g["id"]: g for g in await queue.get_groups()}
    assert groups["a"]["status"] == "paused"
    assert groups["a"]["waiting"] == 1
    assert await queue.get_job_state(jobs[0].id) == "waiting"
    assert await queue.resume_group("a") is True
    assert await queue.resume_group("a") is False
    await wait_state(queue, jobs[0].id, "completed")
    await worker.close()


async def test_max_size_refuses_past_it_and_add_bulk_is_all_or_nothing(
    queue: psyq.Queue,
) -> None:
    await queue.add("j1", {}, group={"id": "a", "maxSize": 2})
    await queue.add("j2", {}, group={"id": "a", "maxSize": 2})
    with pytest.raises(psyq.GroupMaxSizeExceededError) as full:
        await queue.add("j3", {}, group={"id": "a", "maxSize": 2})
    assert full.value.group_id == "a"
    assert full.value.max_size == 2
    with pytest.raises(psyq.GroupMaxSizeExceededError):
        await queue.add_bulk(
            [{"name": "plain"}, grouped("b", maxSize=3), *[grouped("a", maxSize=3)] * 2]
        )
    assert await queue.count() == 2  # the whole batch was refused
    await queue.add_bulk([grouped("a", maxSize=3), grouped("b", maxSize=3)])
    assert await queue.get_groups_job_count() == 4


# ------------------------------------------------------------------ getters
async def test_getters_count_and_list_the_groups(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    await queue.add_bulk([grouped("b"), grouped("a"), grouped("a"), {"name": "plain"}])
    counts = await queue.get_job_counts("waiting", "active")
    assert counts == {"waiting": 4, "active": 0}
    assert await queue.get_groups_job_count() == 3
    assert [g["id"] for g in await queue.get_groups()] == ["a", "b"]
    assert [g["id"] for g in await queue.get_groups(1, 1)] == ["b"]
    assert await queue.get_groups_count() == 2
    assert len(await queue.get_group_jobs("a")) == 2
    assert len(await queue.get_group_jobs("a", 1, 1)) == 1
    release = asyncio.Event()

    async def process(job: psyq.Job) -> None:
        await release.wait()

    make_worker(process, concurrency=4)

    async def both_of_a_active() -> bool:
        return await queue.get_group_active_count("a") == 2

    await eventually(both_of_a_active, "both jobs of a active")
    groups = {g["id"]: g for g in await queue.get_groups()}
    assert groups["a"] == {"id": "a", "waiting": 0, "active": 2, "status": "waiting"}
    assert (await queue.get_job_counts("active"))["active"] == 4
    release.set()


async def test_a_full_group_shows_full(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    await queue.add_bulk([grouped("a"), grouped("a")])
    release = asyncio.Event()

    async def process(job: psyq.Job) -> None:
        await release.wait()

    make_worker(process, concurrency=4, group={"concurrency": 1})
    await eventually(lambda: queue.get_group_active_count("a"), "a job of a active")
    await queue.set_group_concurrency("a", 1)
    groups = {g["id"]: g for g in await queue.get_groups()}
    assert groups["a"] == {"id": "a", "waiting": 1, "active": 1, "status": "full"}
    release.set()


# ------------------------------------------------------------------ the job's path
async def test_a_retried_job_goes_back_to_its_group(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    order: list[str] = []

    def process(job: psyq.Job) -> None:
        order.append(f"{job.name}#{job.attempts_made}")
        if job.name == "a1" and job.attempts_made == 0:
            raise RuntimeError("once")

    await queue.add_bulk(
        [
            {"name": "a1", "opts": {"group": {"id": "a"}, "attempts": 2}},
            {"name": "a2", "opts": {"group": {"id": "a"}}},
            {"name": "b1", "opts": {"group": {"id": "b"}, "attempts": 2, "backoff": 200}},
        ]
    )
    make_worker(process)
    await eventually(lambda: len(order) >= 4, "4 runs", 10)
    assert order[:2] == ["a1#0", "b1#0"]
    assert sorted(order[2:]) == ["a1#1", "a2#0"]

    async def all_completed() -> bool:  # the 4th run starts before it is settled
        done = await queue.get_completed()
        return sorted(job.name for job in done) == ["a1", "a2", "b1"]

    await eventually(all_completed, "a1, a2 and b1 completed", 10)


async def test_a_stalled_grouped_job_comes_back_to_its_group(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("orphan", {}, group={"id": "a"})
    lost = make_worker(None, lock_duration=200)
    taken = await lost.get_next_job("lost-token", block=False)
    assert taken is not None
    assert await queue.get_group_active_count("a") == 1
    rescuer = make_worker(lambda job: "rescued", stalled_interval=200, group={"concurrency": 1})
    rec = Recorder(rescuer, "stalled")
    await wait_state(queue, job.id, "completed")
    assert rec.events["stalled"][0][0] == job.id
    assert await queue.get_group_active_count("a") == 0


async def test_a_cancelled_grouped_job_fails_and_frees_its_group(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    started = asyncio.Event()

    async def process(job: psyq.Job) -> str:
        if job.name == "a1":
            started.set()
            await asyncio.sleep(30)  # sleep: the job's work, cancelled long before it ends
        return job.name

    first = {"name": "a1", "opts": {"group": {"id": "a"}, "attempts": 3}}
    jobs = await queue.add_bulk([first, grouped("a", "a2")])
    worker = make_worker(process, concurrency=2, group={"concurrency": 1})
    await asyncio.wait_for(started.wait(), 5)
    assert await queue.get_job_state(jobs[1].id) == "waiting"  # a's one slot is held
    assert await queue.cancel_job(jobs[0].id, "tenant left")
    await wait_state(queue, jobs[0].id, "failed")  # cancelled: no retry
    await wait_state(queue, jobs[1].id, "completed")  # the slot came free
    assert await queue.get_group_active_count("a") == 0
    await worker.close()


async def test_a_grouped_job_refuses_a_priority_of_its_own(queue: psyq.Queue) -> None:
    job = await queue.add("j", {}, group={"id": "a"})
    with pytest.raises(psyq.InvalidOptionsError) as refused:
        await job.change_priority(3)
    assert "group" in str(refused.value)
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.priority == 0


async def test_grouped_children_of_a_flow_run_in_their_groups(
    queue: psyq.Queue, make_worker: WorkerFactory, backend_url: str
) -> None:
    children = [
        {"name": f"{g}{i}", "queue_name": queue.name, "opts": {"group": {"id": g}}}
        for g in "ab"
        for i in range(2)
    ]
    async with psyq.FlowProducer(connection=backend_url) as producer:
        flow = await producer.add(
            {"name": "parent", "queue_name": queue.name, "children": children}
        )
    assert await queue.get_groups_job_count() == 4
    order = await run_in_order(make_worker, 5)
    assert order[:4] == ["a0", "b0", "a1", "b1"]  # round-robin, children before the parent
    assert order[4] == "parent"
    await wait_state(queue, flow.job.id, "completed")


async def test_max_size_holds_for_the_grouped_children_of_a_flow(
    queue: psyq.Queue, backend_url: str
) -> None:
    await queue.add("j1", {}, group={"id": "a", "maxSize": 2})
    children = [
        {"name": f"a{i}", "queue_name": queue.name, "opts": {"group": {"id": "a", "maxSize": 2}}}
        for i in range(2)
    ]
    async with psyq.FlowProducer(connection=backend_url) as producer:
        with pytest.raises(psyq.GroupMaxSizeExceededError) as full:
            await producer.add({"name": "parent", "queue_name": queue.name, "children": children})
        assert full.value.group_id == "a"
        assert full.value.max_size == 2
        assert await queue.count() == 1  # nothing of the flow was written
        assert await queue.get_job_counts("waiting-children") == {"waiting-children": 0}
        await producer.add({"name": "parent", "queue_name": queue.name, "children": children[1:]})
    assert await queue.get_groups_job_count() == 2


async def test_groups_and_their_settings_move_with_an_export(
    queue: psyq.Queue, backend_url: str
) -> None:
    await queue.add_bulk([grouped("a", "a1"), grouped("a", "a2"), grouped("b", "b1")])
    await queue.set_group_concurrency("a", 2)
    await queue.pause_group("b")
    backend = await open_backend(backend_url)
    try:
        target = fresh_name()
        page = await backend.export_jobs(queue.name, None, 100)
        await backend.import_jobs(target, page)
        await backend.set_queue_meta(target, await backend.get_queue_meta(queue.name))
    finally:
        await release_backend(backend)
    async with psyq.Queue(target, connection=backend_url) as copy:
        assert [job.name for job in await copy.get_group_jobs("a")] == ["a1", "a2"]
        assert await copy.get_group_concurrency("a") == 2
        groups = {g["id"]: g["status"] for g in await copy.get_groups()}
        assert groups == {"a": "waiting", "b": "paused"}
