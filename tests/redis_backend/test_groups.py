"""Groups in Redis (psyq/backends/redis/lua/includes/groups.lua): a group's waiting jobs
live in a line of their own outside `wait`, an emptied group keeps no key, and the
queue-wide operations (drain, clean, obliterate, export and import) take the groups along."""

from __future__ import annotations

from typing import Any

import psyq
from psyq.backends.redis import RedisBackend
from tests.conftest import fresh_name
from tests.polling import eventually


def grouped(group: str, name: str = "j", **extra: Any) -> dict[str, Any]:
    return {"name": name, "data": {"g": group}, "opts": {"group": {"id": group, **extra}}}


async def group_keys(raw: Any, queue: psyq.Queue) -> set[str]:
    """The queue's keys of groups (without the queue key)."""
    key = f"bull:{queue.name}:"
    found = {name[len(key) :] for name in await raw.keys(f"{key}group*")}
    return found


async def run_all(queue: psyq.Queue, url: str, count: int) -> list[str]:
    done: list[str] = []
    worker = psyq.Worker(
        queue.name, lambda job: done.append(job.name), connection=url, drain_delay=1
    )
    try:
        await eventually(lambda: len(done) >= count, f"{count} jobs done", 10)
    finally:
        await worker.close()
    return done


async def test_grouped_jobs_wait_outside_the_wait_list(queue: psyq.Queue, raw: Any) -> None:
    jobs = await queue.add_bulk([grouped("a"), grouped("a", priority=3), grouped("b")])
    key = f"bull:{queue.name}"
    assert await raw.lrange(f"{key}:wait", 0, -1) == []
    assert await raw.zcard(f"{key}:prioritized") == 0
    assert await raw.lrange(f"{key}:group-fifo:a", 0, -1) == [jobs[0].id]  # no group priority
    assert await raw.zrange(f"{key}:group:a", 0, -1) == [jobs[1].id]  # a group priority
    assert await raw.hmget(f"{key}:{jobs[1].id}", "gid", "gpr") == ["a", "3"]
    assert await raw.zrange(f"{key}:groups:ready", 0, -1) == ["a", "b"]
    assert await raw.get(f"{key}:groups:waiting") == "3"


async def test_jobs_of_priority_0_in_the_ranked_set_still_run_after_the_list(
    queue: psyq.Queue, url: str, raw: Any
) -> None:
    """A store written before the list existed kept every waiting job of a group in its
    sorted set: those of priority 0 come after the list's, and nothing is stranded."""
    old, _new = await queue.add_bulk([grouped("a", "old"), grouped("a", "new")])
    key = f"bull:{queue.name}"
    assert await raw.lrem(f"{key}:group-fifo:a", 1, old.id) == 1  # as the old layout kept it
    await raw.zadd(f"{key}:group:a", {old.id: 2**31})
    assert [job.name for job in await queue.get_group_jobs("a")] == ["new", "old"]
    assert await queue.get_counts_per_priority_for_group("a", [0]) == {"0": 2}
    assert await queue.get_job_state(old.id) == "waiting"
    assert await run_all(queue, url, 2) == ["new", "old"]
    assert await group_keys(raw, queue) == set()


async def test_a_range_of_a_groups_jobs_spans_its_list_and_its_ranked_set(
    queue: psyq.Queue,
) -> None:
    await queue.add_bulk(
        [grouped("a", f"p0-{i}") for i in range(3)]
        + [grouped("a", f"p2-{i}", priority=2) for i in range(2)]
    )

    async def names(start: int, end: int) -> list[str]:
        return [job.name for job in await queue.get_group_jobs("a", start, end)]

    assert await names(0, -1) == ["p0-0", "p0-1", "p0-2", "p2-0", "p2-1"]
    assert await names(2, 3) == ["p0-2", "p2-0"]
    assert await names(-2, -1) == ["p2-0", "p2-1"]
    assert await names(1, 100) == ["p0-1", "p0-2", "p2-0", "p2-1"]
    assert await names(4, 2) == [] and await names(9, 12) == []
    assert await names(-100, 0) == ["p0-0"]


async def test_an_emptied_group_keeps_no_key(queue: psyq.Queue, url: str, raw: Any) -> None:
    await queue.add_bulk([grouped("a"), grouped("b"), grouped("a")])
    await queue.set_group_concurrency("a", 2)
    assert await run_all(queue, url, 3) == ["j", "j", "j"]
    assert await group_keys(raw, queue) == {"groups", "group-opts:a"}  # a's own setting
    await queue.set_group_concurrency("a", None)
    assert await group_keys(raw, queue) == set()


async def test_drain_clean_and_remove_take_grouped_jobs(queue: psyq.Queue, raw: Any) -> None:
    first = await queue.add_bulk([grouped("a"), grouped("b")])
    assert await queue.remove(first[0].id) is True
    assert await queue.get_groups_count() == 1
    assert await queue.clean(0, 0, "waiting") == [first[1].id]
    assert await queue.get_groups_job_count() == 0
    await queue.add_bulk([grouped("a"), grouped("b"), {"name": "plain"}])
    await queue.pause_group("b")
    await queue.drain()
    assert await queue.get_job_counts("waiting") == {"waiting": 0}
    assert await group_keys(raw, queue) == {"groups", "group-opts:b"}  # b stays paused
    assert [g["id"] for g in await queue.get_groups()] == ["b"]


async def test_obliterate_takes_every_group_key(queue: psyq.Queue, raw: Any) -> None:
    await queue.add_bulk([grouped(f"g{i % 7}") for i in range(40)])
    await queue.set_group_rate_limit("g1", 5, 1000)
    await queue.pause_group("g2")
    await queue.obliterate()
    assert await raw.keys(f"bull:{queue.name}:*") == []


async def test_export_and_import_carry_the_groups(url: str, raw: Any) -> None:
    source, target = fresh_name("src"), fresh_name("dst")
    async with psyq.Queue(source, connection=url) as queue:
        await queue.add_bulk([grouped("a", "a1"), grouped("b", "b1"), grouped("a", "a2")])
        await queue.add("late", {}, group={"id": "b"}, delay=60_000)
        await queue.set_group_concurrency("a", 2)
        await queue.pause_group("b")
    backend = RedisBackend(url)
    await backend.open()
    try:
        meta = await backend.get_queue_meta(source)
        assert meta["groups"] == {"a": {"concurrency": 2}, "b": {"paused": True}}
        page = await backend.export_jobs(source, None, 100)
        assert await backend.import_jobs(target, page) == 4
        await backend.set_queue_meta(target, meta)
    finally:
        await backend.close()
    async with psyq.Queue(target, connection=url) as queue:
        assert [j.name for j in await queue.get_group_jobs("a")] == ["a1", "a2"]
        assert await queue.get_group_concurrency("a") == 2
        groups = {g["id"]: g["status"] for g in await queue.get_groups()}
        assert groups == {"a": "waiting", "b": "paused"}
        assert await queue.get_job_counts("waiting", "delayed") == {"waiting": 3, "delayed": 1}
        assert sorted(await run_all(queue, url, 2)) == ["a1", "a2"]


async def test_a_flow_with_grouped_children(url: str) -> None:
    name = fresh_name("flow")
    async with psyq.FlowProducer(connection=url) as producer:
        tree = await producer.add(
            {
                "name": "parent",
                "queue_name": name,
                "children": [
                    {"name": "c1", "queue_name": name, "opts": {"group": {"id": "a"}}},
                    {"name": "c2", "queue_name": name, "opts": {"group": {"id": "b"}}},
                ],
            }
        )
    async with psyq.Queue(name, connection=url) as queue:
        assert await queue.get_groups_job_count() == 2
        assert sorted(await run_all(queue, url, 3)) == ["c1", "c2", "parent"]
        assert await queue.get_job_state(tree.job.id) == "completed"


async def test_a_bulk_keeps_each_groups_order_across_its_forms(queue: psyq.Queue) -> None:
    """addJobs gathers the short-form grouped jobs per group; a job of the long form (here
    with a maxSize) or a plain one in between keeps its place."""
    await queue.add_bulk(
        [
            grouped("a", "a1"),
            {"name": "plain"},
            grouped("a", "a2", maxSize=10),
            grouped("b", "b1", priority=1),
            grouped("a", "a3"),
            grouped("b", "b0"),
        ]
    )
    assert [j.name for j in await queue.get_group_jobs("a")] == ["a1", "a2", "a3"]
    assert [j.name for j in await queue.get_group_jobs("b")] == ["b0", "b1"]
    assert await queue.get_job_counts("waiting") == {"waiting": 6}
