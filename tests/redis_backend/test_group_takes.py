"""Grouped takes and settles several jobs per script call (lua/includes/grouptake.lua,
groups.lua flushGroupLeaves): a take of n jobs takes what n takes of one job would, in the
same order, and leaves the rotation, the active counts and the full groups as they would;
a settle of many jobs leaves what as many settles of one would. And what a grouped job
costs Redis stays near a plain one's."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import Completed, FetchRequest, GroupLimits, Limiter, Settlement
from tests.conftest import fresh_name


def grouped(group: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "opts": {"group": {"id": group, **extra}}}


@pytest.fixture
async def backend(url: str) -> AsyncIterator[Any]:
    opened = await open_backend(url)
    try:
        yield opened
    finally:
        await release_backend(opened)


async def group_state(raw: Any, queue: str) -> dict[str, Any]:
    key = f"bull:{queue}"
    return {
        "ready": await raw.zrange(f"{key}:groups:ready", 0, -1),
        "limited": sorted(await raw.zrange(f"{key}:groups:limited", 0, -1)),  # by a time
        "full": sorted(await raw.smembers(f"{key}:groups:full")),
        "active": await raw.hgetall(f"{key}:groups:active"),
        "waiting": await raw.get(f"{key}:groups:waiting"),
        "groups": await raw.zrange(f"{key}:groups", 0, -1),
    }


async def fill(url: str, name: str, seed: int) -> None:
    """Jobs in groups of random sizes and priorities, a few plain ones, some settings."""
    rng = random.Random(seed)
    entries: list[dict[str, Any]] = []
    for n in range(rng.randint(20, 60)):
        group = f"g{rng.randint(0, 7)}"
        if rng.random() < 0.1:
            entries.append({"name": f"plain-{n}"})
        elif rng.random() < 0.2:
            entries.append(grouped(group, f"{group}-{n}", priority=rng.randint(1, 3)))
        else:
            entries.append(grouped(group, f"{group}-{n}"))
    async with psyq.Queue(name, connection=url) as queue:
        await queue.set_group_concurrency("g1", 2)
        await queue.set_group_rate_limit("g2", 3, 60_000)  # a window the test cannot outlive
        await queue.pause_group("g3")
        for start in range(0, len(entries), 7):
            await queue.add_bulk(entries[start : start + 7])


def request(tokens: list[str], worker_limits: bool) -> FetchRequest:
    group = GroupLimits(concurrency=3, limiter=Limiter(4, 60_000)) if worker_limits else None
    return FetchRequest(tokens, 30_000, "w", group=group)


@pytest.mark.parametrize("seed", range(12))
async def test_a_take_of_many_takes_what_takes_of_one_would(
    backend: Any, url: str, raw: Any, seed: int
) -> None:
    batched, single = fresh_name("many"), fresh_name("one")
    await fill(url, batched, seed)
    await fill(url, single, seed)
    rng = random.Random(seed)
    worker_limits = seed % 2 == 1
    held: dict[str, list[Any]] = {batched: [], single: []}
    for step in range(12):
        size = rng.randint(1, 9)
        tokens = [f"t{step}-{i}" for i in range(size)]
        many = await backend.move_to_active(batched, request(tokens, worker_limits))
        ones: list[Any] = []
        for token in tokens:
            ones += await backend.move_to_active(single, request([token], worker_limits))
        assert [job.name for job in many] == [job.name for job in ones], f"step {step}"
        held[batched] += many
        held[single] += ones
        assert await group_state(raw, batched) == await group_state(raw, single), f"step {step}"
        done = rng.sample(range(len(held[batched])), k=len(held[batched]) // 2)
        for queue, one_by_one in ((batched, False), (single, True)):
            settle = [held[queue][i] for i in sorted(done)]
            held[queue] = [job for i, job in enumerate(held[queue]) if i not in done]
            settlements = [Settlement(job.id, job.lock_token, Completed("null")) for job in settle]
            calls = [[s] for s in settlements] if one_by_one else [settlements]
            for call in calls:
                errors, _ = await backend.settle_many(queue, call)
                assert errors == [None] * len(call)
        assert await group_state(raw, batched) == await group_state(raw, single), f"step {step}"
    for queue in (batched, single):
        await backend.obliterate(queue, force=True)


async def test_a_settle_of_a_full_groups_jobs_puts_it_back_once(
    backend: Any, queue: psyq.Queue, raw: Any
) -> None:
    await queue.add_bulk([grouped("a", f"a{i}") for i in range(6)])
    limits = GroupLimits(concurrency=2)
    taken = await backend.move_to_active(
        queue.name, FetchRequest(["1", "2", "3"], 30_000, group=limits)
    )
    assert [job.name for job in taken] == ["a0", "a1"]
    state = await group_state(raw, queue.name)
    assert (state["ready"], state["full"], state["active"]) == ([], ["a"], {"a": "2"})
    settlements = [Settlement(job.id, job.lock_token, Completed("null")) for job in taken]
    errors, fetched = await backend.settle_many(
        queue.name, settlements, FetchRequest(["4", "5", "6"], 30_000, group=limits)
    )
    assert errors == [None, None]
    assert [job.name for job in fetched] == ["a2", "a3"]
    state = await group_state(raw, queue.name)
    assert (state["ready"], state["full"], state["active"]) == ([], ["a"], {"a": "2"})


async def script_commands(raw: Any) -> int:
    """Commands Redis ran so far, those inside scripts included (EVALSHA left out)."""
    stats = await raw.info("commandstats")
    skipped = ("cmdstat_evalsha", "cmdstat_info")
    return sum(int(v["calls"]) for name, v in stats.items() if name not in skipped)


async def test_a_grouped_job_costs_redis_a_few_commands_more_than_a_plain_one(
    backend: Any, raw: Any, url: str
) -> None:
    """20 jobs taken in one call and settled in one call: plain, in 10 groups and in 20
    (each group once). The take pops each group once and writes the rotation once; the
    settle counts each group's jobs out at once."""
    costs = {}
    for groups in (0, 10, 20):
        name = fresh_name("cost")
        async with psyq.Queue(name, connection=url) as queue:
            entries = [
                grouped(f"g{i % groups}", "j") if groups else {"name": "j"} for i in range(20)
            ]
            await queue.add_bulk(entries)
        before = await script_commands(raw)
        taken = await backend.move_to_active(
            name, FetchRequest([str(i) for i in range(20)], 30_000)
        )
        assert len(taken) == 20
        settlements = [Settlement(job.id, job.lock_token, Completed("null")) for job in taken]
        errors, _ = await backend.settle_many(name, settlements)
        assert errors == [None] * 20
        costs[groups] = (await script_commands(raw) - before - 2) / 20  # less the INFO's own
        await backend.obliterate(name, force=True)
    # a pop and a count per group and call on each side, a few commands per call
    assert costs[10] <= costs[0] + 1.6, costs
    assert costs[20] <= costs[0] + 3.2, costs
