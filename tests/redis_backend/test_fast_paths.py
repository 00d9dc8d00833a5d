"""The Redis fast paths: several jobs per fetch, settle_many with fetch in one call, big
pipelined bulks, and concurrent calls sharing pipelines."""

from __future__ import annotations

import asyncio
from typing import Any

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import Completed, Failed, FetchRequest, Retry, Settlement


async def test_one_fetch_takes_several_jobs_and_settle_many_fetches_more(
    queue: psyq.Queue, url: str
) -> None:
    await queue.add_bulk([{"name": "j", "data": i} for i in range(6)])
    backend = await open_backend(url)
    try:
        taken = await backend.move_to_active(queue.name, FetchRequest(["a", "b", "c"], 30_000))
        assert [job.id for job in taken] == ["1", "2", "3"]
        assert [job.lock_token for job in taken] == ["a", "b", "c"]
        settlements = [
            Settlement("1", "a", Completed('"one"')),
            Settlement("2", "b", Failed("bad")),
            Settlement("3", "c", Retry("again", delay=0)),
            Settlement("3", "wrong", Completed("null")),  # no longer active: an error, alone
        ]
        errors, fetched = await backend.settle_many(
            queue.name, settlements, FetchRequest(["d", "e"], 30_000)
        )
        assert [error is None for error in errors] == [True, True, True, False]
        assert [job.id for job in fetched] == ["4", "5"]
        counts = await queue.get_job_counts("completed", "failed", "waiting", "active")
        assert counts == {"completed": 1, "failed": 1, "waiting": 2, "active": 2}
    finally:
        await release_backend(backend)


async def test_a_bulk_bigger_than_one_script_call(queue: psyq.Queue) -> None:
    jobs = await queue.add_bulk([{"name": "j", "data": i} for i in range(2500)])
    assert [job.id for job in jobs[:2]] == ["1", "2"] and jobs[-1].id == "2500"
    assert await queue.get_job_counts("waiting") == {"waiting": 2500}
    waiting = await queue.get_waiting(0, 2)
    assert [job.data for job in waiting] == [0, 1, 2]


async def test_concurrent_calls_share_pipelines_and_keep_their_order(queue: psyq.Queue) -> None:
    added: list[Any] = await asyncio.gather(*(queue.add("j", i) for i in range(200)))
    assert sorted(int(job.id) for job in added) == list(range(1, 201))
    states = await asyncio.gather(*(queue.get_job_state(job.id) for job in added))
    assert set(states) == {"waiting"}


async def test_settles_merged_in_one_call_fail_alone(queue: psyq.Queue, url: str, raw: Any) -> None:
    """Settles of one loop turn share a script call; a job whose settle raises in Lua (opts
    that another client wrote as bad JSON) fails alone, and the others complete."""
    await queue.add_bulk([{"name": "j", "data": i} for i in range(4)])
    backend = await open_backend(url)
    try:
        taken = await backend.move_to_active(queue.name, FetchRequest(list("abcd"), 30_000))
        await raw.hset(f"bull:{queue.name}:2", "opts", "{not json")
        results = await asyncio.gather(
            *(
                backend.move_to_finished(queue.name, job.id, job.lock_token or "", Completed("1"))
                for job in taken
            ),
            return_exceptions=True,
        )
    finally:
        await release_backend(backend)
    assert [isinstance(result, psyq.PsyqError) for result in results] == [0, 1, 0, 0]
    assert "moveToFinished" in str(results[1])
    # job 2 keeps what its settle wrote before the error (Redis does not roll a script back,
    # as with a call of its own); the others are settled in full
    for job_id in ("1", "3", "4"):
        assert await queue.get_job_state(job_id) == "completed"


async def test_adds_arriving_together_are_gathered_in_call_order(
    queue: psyq.Queue, raw: Any
) -> None:
    """Single adds that arrive while another is out go to Redis as one script call, each
    caller getting its own job, in the order of the calls."""
    await queue.add("first", 0)  # scripts loaded, connection open

    async def script_calls() -> int:
        stats = await raw.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = await script_calls()
    added: list[Any] = await asyncio.gather(*(queue.add("j", {"n": i}) for i in range(100)))
    calls = await script_calls() - before
    assert [job.data["n"] for job in added] == list(range(100))
    assert [int(job.id) for job in added] == list(range(2, 102))
    assert calls <= 3  # the first add alone, then the others together
    waiting = await queue.get_waiting(0, -1)
    assert [job.data for job in waiting] == [0, *({"n": i} for i in range(100))]


async def test_a_gathered_add_keeps_custom_ids_and_a_cancelled_one_adds_nothing(
    queue: psyq.Queue,
) -> None:
    await queue.add("first", 0)
    tasks = [asyncio.ensure_future(queue.add("j", i, job_id="same")) for i in range(3)]
    lone = asyncio.ensure_future(queue.add("j", "gone", job_id="gone"))
    spare = asyncio.ensure_future(queue.add("j", "kept", job_id="kept"))
    await asyncio.sleep(0)  # every add has started: the first is out, the others gathered
    lone.cancel()
    jobs = await asyncio.gather(*tasks)
    assert [job.id for job in jobs] == ["same"] * 3
    assert {job.data for job in jobs} == {0}  # the first one added it; the others found it
    assert (await spare).id == "kept"
    assert await queue.get_job("gone") is None


async def test_producers_adding_one_by_one_at_once_all_finish(queue: psyq.Queue) -> None:
    """Many producers, each awaiting its adds one after the other: adds are gathered while
    others are out, and every add returns (replies and gathered sends interleave freely)."""

    async def produce(count: int) -> list[str]:
        return [(await queue.add("j", {"k": k})).id for k in range(count)]

    ids = await asyncio.wait_for(asyncio.gather(*(produce(30) for _ in range(50))), 60)
    assert len({job_id for batch in ids for job_id in batch}) == 1500
    assert await queue.get_job_counts("waiting") == {"waiting": 1500}


async def test_adds_and_a_bulk_called_together_keep_their_order(queue: psyq.Queue) -> None:
    await queue.add("first", 0)
    out = asyncio.ensure_future(queue.add("j", "a"))  # out when the others are called
    await asyncio.sleep(0)
    bulk = [{"name": "j", "data": "c1"}, {"name": "j", "data": "c2"}]
    jobs = await asyncio.gather(queue.add("j", "b"), queue.add_bulk(bulk), queue.add("j", "d"))
    await out
    assert [jobs[0].data, *(job.data for job in jobs[1]), jobs[2].data] == ["b", "c1", "c2", "d"]
    waiting = await queue.get_waiting(0, -1)
    assert [job.data for job in waiting] == [0, "a", "b", "c1", "c2", "d"]
