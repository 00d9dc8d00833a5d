"""The engine below the core: sharding, shared named engines, wake-ups, URLs."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from psyq.backends.base import Completed, FetchRequest, NewJob
from psyq.backends.engine import Engine, MemoryBackend, fnv1a
from psyq.errors import InvalidURLError
from psyq.rules.clock import ManualClock
from tests.polling import eventually, eventually_sync


def new(name: str = "j", **opts: object) -> NewJob:
    return NewJob(name, "null", dict(opts))


def fetch(n: int = 1, lock: int = 30_000) -> FetchRequest:
    return FetchRequest([f"t{i}" for i in range(n)], lock, "w")


def test_fnv1a_known_values() -> None:
    assert fnv1a("") == 0x811C9DC5
    assert fnv1a("a") == 0xE40C292C
    assert fnv1a("foobar") == 0xBF9CF968


def test_queues_spread_over_shards() -> None:
    engine = Engine(shards=16)
    used = {id(engine.shard(f"bull:q{i}")) for i in range(200)}
    assert len(used) == 16
    assert engine.shard("bull:q1") is engine.shard("bull:q1")


async def test_same_url_shares_jobs_and_prefixes_separate_them() -> None:
    a = MemoryBackend("memory://shared-test")
    b = MemoryBackend("memory://shared-test")
    other = MemoryBackend("memory://shared-test?prefix=other")
    await a.add_jobs("q", [new()])
    assert (await b.get_job_counts("q", ["waiting"]))["waiting"] == 1
    assert (await other.get_job_counts("q", ["waiting"]))["waiting"] == 0
    assert "q" in await b.list_queues()


@pytest.mark.parametrize(
    "url", ["redis://x", "memory://?prefix=a:b", "memory://?durability=durable"]
)
def test_bad_urls_name_the_problem(url: str) -> None:
    with pytest.raises(InvalidURLError) as err:
        MemoryBackend(url)
    assert url in str(err.value)


async def test_ids_increase_per_queue_and_custom_ids_are_kept() -> None:
    backend = MemoryBackend("memory://ids")
    first = await backend.add_jobs("q1", [new(), new()])
    other = await backend.add_jobs("q2", [new()])
    custom = await backend.add_jobs("q1", [new(jobId="mine"), new(jobId="mine"), new()])
    assert [r.id for r in first] == ["1", "2"]
    assert [r.id for r in other] == ["1"]
    assert [r.id for r in custom] == ["mine", "mine", "3"]
    assert custom[0] is custom[1]


async def test_plain_before_prioritized_and_lifo_in_front() -> None:
    backend = MemoryBackend("memory://order")
    await backend.add_jobs(
        "q", [new("p5", priority=5), new("a"), new("p1", priority=1), new("b"), new("l", lifo=True)]
    )
    taken = await backend.move_to_active("q", fetch(5))
    assert [r.name for r in taken] == ["l", "a", "b", "p1", "p5"]


def waiting(backend: MemoryBackend, queue: str) -> bool:
    """Whether a `wait_for_job` on `queue` is registered, waiting to be woken."""
    return backend._run(queue, lambda store: bool(store.waiters))


async def test_waiter_wakes_on_add_from_another_thread() -> None:
    backend = MemoryBackend("memory://wake-thread")
    started = time.monotonic()

    def producer() -> None:
        eventually_sync(lambda: waiting(backend, "q"), "the waiter waiting")
        asyncio.run(backend.add_jobs("q", [new()]))

    thread = threading.Thread(target=producer)
    thread.start()
    await backend.wait_for_job("q", 5_000)
    thread.join()
    assert time.monotonic() - started < 2
    assert len(await backend.move_to_active("q", fetch())) == 1


async def test_waiter_wakes_when_a_delayed_job_is_due() -> None:
    backend = MemoryBackend("memory://wake-delay")
    await backend.add_jobs("q", [new(delay=60)])
    assert await backend.move_to_active("q", fetch()) == []
    started = time.monotonic()
    await backend.wait_for_job("q", 5_000)
    assert time.monotonic() - started < 1
    assert len(await backend.move_to_active("q", fetch())) == 1


async def test_a_waiter_never_wakes_before_the_delayed_job_is_due() -> None:
    # the clock reads whole ms and uvloop's timers fire in whole ms, up to one early: a
    # wake-up for a due time must come when the job can be taken (about 1 in 100 did not)
    # (a run paused for over 5 ms between the add and the first take finds the job due at
    # once: that round proves nothing and is not counted)
    backend = MemoryBackend("memory://wake-delay-early")
    early = waited = 0
    for _ in range(200):
        await backend.add_jobs("q", [new(delay=5)])
        if not await backend.move_to_active("q", fetch()):
            await backend.wait_for_job("q", 5_000)
            early += not await backend.move_to_active("q", fetch())
            waited += 1
        await backend.drain("q", True)
    assert early == 0 and waited >= 100


async def test_manual_clock_advance_wakes_and_promotes() -> None:
    clock = ManualClock()
    backend = MemoryBackend("memory://", clock=clock)
    await backend.add_jobs("q", [new(delay=10_000)])
    waiter = asyncio.ensure_future(backend.wait_for_job("q", 60_000))
    await eventually(lambda: waiting(backend, "q"), "the waiter waiting")
    assert not waiter.done()
    clock.advance(10_000)
    await asyncio.wait_for(waiter, 1)
    taken = await backend.move_to_active("q", fetch())
    assert taken[0].processed_on == clock.now_ms()


async def test_paused_queue_blocks_waiters_until_resume() -> None:
    backend = MemoryBackend("memory://paused")
    await backend.pause("q")
    await backend.add_jobs("q", [new()])
    waiter = asyncio.ensure_future(backend.wait_for_job("q", 5_000))
    await eventually(lambda: waiting(backend, "q"), "the waiter waiting")
    await asyncio.sleep(0.05)  # sleep: a while in which the paused queue must not wake it
    assert not waiter.done()
    assert await backend.move_to_active("q", fetch()) == []
    await backend.resume("q")
    await asyncio.wait_for(waiter, 1)


async def test_retention_keeps_the_newest_completed() -> None:
    backend = MemoryBackend("memory://retention")
    await backend.add_jobs("q", [new(removeOnComplete=2) for _ in range(5)])
    for record in await backend.move_to_active("q", fetch(5)):
        await backend.move_to_finished("q", record.id, record.lock_token or "", Completed("1"))
    done = await backend.get_jobs("q", ["completed"], 0, -1, True)
    assert [r.id for r in done] == ["4", "5"]
    assert await backend.get_job("q", "1") is None


async def test_memory_is_bounded_with_remove_on_complete() -> None:
    backend = MemoryBackend("memory://bounded")
    for _ in range(20):
        await backend.add_jobs("q", [new(removeOnComplete=True) for _ in range(500)])
        records = await backend.move_to_active("q", fetch(500))
        for record in records:
            await backend.move_to_finished("q", record.id, record.lock_token or "", Completed("1"))
    counts = await backend.get_job_counts("q", ["completed", "waiting", "active"])
    assert counts == {"completed": 0, "waiting": 0, "active": 0}
    key_store = next(s.stores["bull:q"] for s in backend.engine.shards if "bull:q" in s.stores)
    assert key_store.jobs == {} and key_store.logs == {}


async def test_a_wait_closed_by_a_thread_holding_every_lock_does_not_deadlock() -> None:
    """The garbage collector may finalize an abandoned wait_for_job coroutine in any thread,
    e.g. the SQLite flush thread while it holds every shard lock: the wait's clean-up must
    not block on those locks."""
    import threading

    from psyq.backends.engine.memory import MemoryBackend

    backend = MemoryBackend("memory://finalized-wait")
    waiting = backend.wait_for_job("q", 60_000)
    waiting.send(None)  # now suspended on its wake-up future

    def close_under_every_lock() -> None:
        with backend.engine.every_lock():
            waiting.close()  # what the garbage collector does to an abandoned coroutine

    closer = threading.Thread(target=close_under_every_lock, daemon=True)
    closer.start()
    closer.join(5)
    assert not closer.is_alive(), "closing the wait deadlocked on the shard lock"


async def test_grouped_jobs_share_options_per_group_and_keep_their_order() -> None:
    backend = MemoryBackend("memory://grouped-add")
    shared = {"group": {"id": "a"}}  # what the gate gives every job of group a
    jobs = [
        NewJob("a1", "1", shared),
        NewJob("a2", "2", {"group": {"id": "a"}}),  # an equal dict (as psyq:// decodes one)
        NewJob("b1", "3", {"group": {"id": "b", "priority": 2}}),
        NewJob("b2", "4", {"group": {"id": "b", "priority": 1}}),
        NewJob("b3", "5", {"group": {"id": "b", "priority": 1}}),
        NewJob("c1", "6", {"group": {"id": "c", "maxSize": 5}}),
    ]
    records = await backend.add_jobs("q", jobs)
    a1, a2, b1, b2, b3, c1 = records
    assert c1.opts == {"group": {"id": "c", "maxSize": 5}}
    assert a1.opts is a2.opts is shared
    assert b2.opts is b3.opts and b2.opts is not b1.opts
    assert [r.state for r in records] == ["waiting"] * 6
    assert [r.name for r in await backend.get_group_jobs("q", "b", 0, -1)] == ["b2", "b3", "b1"]
    assert await backend.get_groups_job_count("q") == 6
    taken = await backend.move_to_active("q", fetch(6))
    assert [r.name for r in taken] == ["a1", "b2", "c1", "a2", "b3", "b1"]  # round-robin
