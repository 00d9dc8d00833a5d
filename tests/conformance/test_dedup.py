"""Deduplication: simple, throttle (ttl) and debounce (replace + extend) modes."""

from __future__ import annotations

import asyncio
import time

import psyq
from tests.polling import eventually

from .conftest import Recorder, WorkerFactory, wait_state


async def test_simple_mode_until_the_job_finishes(
    queue: psyq.Queue, queue_events: psyq.QueueEvents, make_worker: WorkerFactory
) -> None:
    rec = Recorder(queue_events, "deduplicated")
    first = await queue.add("x", {"v": 1}, deduplication={"id": "k"})
    second = await queue.add("x", {"v": 2}, deduplication={"id": "k"})
    assert second.id == first.id and second.data == {"v": 1}
    assert await queue.count() == 1
    assert await queue.get_deduplication_job_id("k") == first.id
    await rec.wait("deduplicated")
    assert rec.events["deduplicated"][0][0]["deduplicationId"] == "k"
    make_worker(lambda job: None)
    await wait_state(queue, first.id, "completed")
    assert await queue.get_deduplication_job_id("k") is None
    third = await queue.add("x", {"v": 3}, deduplication={"id": "k"})
    assert third.id != first.id


async def test_throttle_mode_holds_for_the_ttl(queue: psyq.Queue) -> None:
    # A second wide enough that a slow add on a loaded machine still falls inside it
    # (a 100 ms window once let a CI run's second add land after the key expired).
    opts = {"id": "t", "ttl": 1000}
    first = await queue.add("x", deduplication=opts)
    assert (await queue.add("x", deduplication=opts)).id == first.id
    await asyncio.sleep(1.05)  # sleep: past the ttl, the key expires
    assert (await queue.add("x", deduplication=opts)).id != first.id


async def test_debounce_mode_replaces_the_delayed_job(queue: psyq.Queue) -> None:
    opts = {"id": "d", "ttl": 1000, "extend": True, "replace": True}
    first = await queue.add("x", {"v": 1}, delay=1000, deduplication=opts)
    second = await queue.add("x", {"v": 2}, delay=1000, deduplication=opts)
    assert second.id != first.id
    assert await queue.get_job(first.id) is None
    delayed = await queue.get_delayed()
    assert [job.data for job in delayed] == [{"v": 2}]
    assert await queue.get_deduplication_job_id("d") == second.id


async def test_each_debounce_replacement_emits_deduplicated(
    queue: psyq.Queue, queue_events: psyq.QueueEvents
) -> None:
    """As BullMQ's deduplicateJob: one `deduplicated` per replaced add, with the new job's id
    (`jobId`) and the id of the delayed job it replaced (`deduplicatedJobId`)."""
    rec = Recorder(queue_events, "deduplicated", "removed")
    opts = {"id": "deb", "ttl": 1000, "extend": True, "replace": True}
    added = [await queue.add("x", {"v": n}, delay=1000, deduplication=opts) for n in range(3)]
    await eventually(
        lambda: len(rec.events["deduplicated"]) >= 2 and len(rec.events["removed"]) >= 2
    )
    assert [args[0] for args in rec.events["deduplicated"]] == [
        {"jobId": added[1].id, "deduplicationId": "deb", "deduplicatedJobId": added[0].id},
        {"jobId": added[2].id, "deduplicationId": "deb", "deduplicatedJobId": added[1].id},
    ]
    assert [args[0]["jobId"] for args in rec.events["removed"]] == [added[0].id, added[1].id]


async def test_a_refused_add_names_its_own_id_in_deduplicated(
    queue: psyq.Queue, queue_events: psyq.QueueEvents
) -> None:
    """As BullMQ: the add takes its id before it is deduplicated, and the event names the
    job holding the key (`jobId`) and the refused add's id (`deduplicatedJobId`)."""
    rec = Recorder(queue_events, "deduplicated")
    first = await queue.add("x", deduplication={"id": "once"})
    again = await queue.add("x", deduplication={"id": "once"})
    assert again.id == first.id
    [(args, _)] = await rec.wait("deduplicated")
    assert args["jobId"] == first.id and args["deduplicationId"] == "once"
    assert args["deduplicatedJobId"] not in ("", first.id)
    later = await queue.add("y")
    assert later.id not in (first.id, args["deduplicatedJobId"])


async def test_remove_deduplication_key(queue: psyq.Queue) -> None:
    first = await queue.add("x", deduplication={"id": "r"})
    assert await queue.remove_deduplication_key("r")
    assert not await queue.remove_deduplication_key("r")
    assert (await queue.add("x", deduplication={"id": "r"})).id != first.id


async def test_a_debounce_replace_without_extend_keeps_the_ttl(queue: psyq.Queue) -> None:
    """As BullMQ's deduplicateJob (`SET ... KEEPTTL`): a replace without `extend` hands the
    key to the new job but leaves its expiry where the first add set it, so an add after
    that expiry starts a new job instead of replacing the second one."""
    opts = {"id": "keep", "ttl": 2000, "replace": True}
    first = await queue.add("x", {"v": 1}, delay=60_000, deduplication=opts)
    first_added = time.monotonic()
    await asyncio.sleep(1.0)  # sleep: the second add lands inside the first one's ttl
    second = await queue.add("x", {"v": 2}, delay=60_000, deduplication=opts)
    assert await queue.get_job(first.id) is None
    await asyncio.sleep(max(0.0, first_added + 2.1 - time.monotonic()))  # sleep: past its expiry
    third = await queue.add("x", {"v": 3}, delay=60_000, deduplication=opts)
    assert third.id not in (first.id, second.id)
    assert await queue.get_job(second.id) is not None, "the ttl was restarted by the replace"
    assert sorted(job.data["v"] for job in await queue.get_delayed()) == [2, 3]
    assert await queue.get_deduplication_job_id("keep") == third.id
