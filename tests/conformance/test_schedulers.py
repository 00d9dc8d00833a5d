"""Job schedulers: one pending job per scheduler, ids, replacement, limits, bad specs."""

from __future__ import annotations

import itertools
import re

import pytest

import psyq

from .conftest import Recorder, WorkerFactory, now_ms


async def pending(queue: psyq.Queue) -> list[psyq.Job]:
    return await queue.get_jobs(["delayed", "waiting", "prioritized"])


async def test_every_creates_one_pending_job_and_the_next_when_it_runs(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    first = await queue.upsert_job_scheduler(
        "tick", {"every": 100}, {"name": "tick", "data": {"n": 1}}
    )
    assert first is not None
    assert re.fullmatch(r"repeat:tick:\d+", first.id)
    assert first.name == "tick" and first.data == {"n": 1}
    assert [job.id for job in await pending(queue)] == [first.id]
    worker = make_worker(lambda job: job.id)
    rec = Recorder(worker, "completed")
    await rec.wait("completed", 3, timeout=5)
    await worker.close()
    ids = [args[0].id for args in rec.events["completed"]]
    millis = [int(job_id.rsplit(":", 1)[1]) for job_id in ids]
    assert all(b - a >= 100 for a, b in itertools.pairwise(millis))
    assert len(await pending(queue)) == 1
    info = await queue.get_job_scheduler("tick")
    assert info is not None and info["every"] == 100 and info["iterationCount"] >= 4


async def test_upsert_replaces_without_duplicates(queue: psyq.Queue) -> None:
    await queue.upsert_job_scheduler("s", {"every": 60_000}, {"name": "a"})
    await queue.upsert_job_scheduler("s", {"every": 60_000}, {"name": "b"})
    await queue.upsert_job_scheduler("s", {"pattern": "0 9 * * *"}, {"name": "c"})
    jobs = await pending(queue)
    assert [job.name for job in jobs] == ["c"]
    assert await queue.get_job_schedulers_count() == 1
    listed = await queue.get_job_schedulers()
    assert listed[0]["key"] == "s" and listed[0]["pattern"] == "0 9 * * *"


async def test_a_scheduler_reads_back_its_template_data_as_a_value(queue: psyq.Queue) -> None:
    template = {"name": "t", "data": {"k": [1, "v"]}, "opts": {"attempts": 2}}
    await queue.upsert_job_scheduler("s", {"every": 60_000}, template)
    one = await queue.get_job_scheduler("s")
    assert one is not None and one["template"]["data"] == {"k": [1, "v"]}
    assert one["template"]["opts"]["attempts"] == 2
    [listed] = await queue.get_job_schedulers()
    assert listed["template"]["data"] == {"k": [1, "v"]}


async def test_pattern_runs_at_the_next_match_in_its_time_zone(queue: psyq.Queue) -> None:
    job = await queue.upsert_job_scheduler(
        "daily", {"pattern": "30 2 * * *", "tz": "Europe/Berlin"}, {"name": "d"}
    )
    assert job is not None
    due = job.timestamp + job.delay
    assert due > now_ms()
    import datetime as dt
    from zoneinfo import ZoneInfo

    local = dt.datetime.fromtimestamp(due / 1000, ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) in ((2, 30), (3, 0))  # 03:00 on a spring-forward day


async def test_immediately_and_limit(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    job = await queue.upsert_job_scheduler(
        "twice", {"every": 50, "limit": 2, "immediately": True}, {"name": "t"}
    )
    assert job is not None and job.delay <= 5
    worker = make_worker(lambda job: None)
    rec = Recorder(worker, "completed")
    await rec.wait("completed", 2)
    assert await pending(queue) == []
    info = await queue.get_job_scheduler("twice")
    assert info is not None and info["next"] is None


async def test_end_date_in_the_past_creates_nothing(queue: psyq.Queue) -> None:
    job = await queue.upsert_job_scheduler(
        "over", {"every": 1000, "start_date": now_ms() + 10_000, "end_date": now_ms() + 5000}
    )
    assert job is None
    assert await pending(queue) == []


async def test_remove_scheduler_removes_its_pending_job(queue: psyq.Queue) -> None:
    await queue.upsert_job_scheduler("gone", {"every": 60_000})
    assert await queue.remove_job_scheduler("gone")
    assert not await queue.remove_job_scheduler("gone")
    assert await pending(queue) == []
    assert await queue.get_job_scheduler("gone") is None


@pytest.mark.parametrize(
    ("repeat", "template", "named"),
    [
        ({"pattern": "61 * * * *"}, None, "61 * * * *"),
        ({"pattern": "* * * * *", "tz": "Mars/Olympus"}, None, "Mars/Olympus"),
        ({"every": -5}, None, "every"),
        ({"every": 10, "pattern": "* * * * *"}, None, "exactly one"),
        ({"every": 10, "limit": 0}, None, "limit"),
        ({"every": 10, "bogus": 1}, None, "bogus"),
        ({"every": 10}, {"opts": {"jobId": "x"}}, "jobId"),
        ({"every": 10}, {"opts": {"attempts": 0}}, "attempts"),
    ],
)
async def test_bad_specs_are_refused_before_anything_is_written(
    queue: psyq.Queue, repeat: dict[str, object], template: dict[str, object] | None, named: str
) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match=re.escape(named)):
        await queue.upsert_job_scheduler("bad", repeat, template)
    assert await queue.get_job_schedulers_count() == 0
    assert await pending(queue) == []


async def test_the_pending_run_is_removed_only_with_its_scheduler(queue: psyq.Queue) -> None:
    job = await queue.upsert_job_scheduler("keep", {"pattern": "0 0 1 1 *"})
    assert job is not None
    assert not await queue.remove(job.id)  # as BullMQ refuses it (error -8)
    with pytest.raises(psyq.JobStateError):
        await job.remove()
    assert [run.id for run in await pending(queue)] == [job.id]
    assert await queue.remove_job_scheduler("keep")
    assert await pending(queue) == []


async def test_an_unchanged_upsert_keeps_the_pending_run(queue: psyq.Queue) -> None:
    """Issue 41 (defect 2), BullMQ issue 2988: running the same upsert again (at every
    deploy, from several processes) replaces the pending run at the same time, so it never
    adds a run."""
    first = await queue.upsert_job_scheduler("s", {"every": 60_000}, {"name": "a"})
    again = await queue.upsert_job_scheduler("s", {"every": 60_000}, {"name": "b"})
    assert first is not None and again is not None
    assert again.id == first.id
    assert [(job.id, job.name) for job in await pending(queue)] == [(first.id, "b")]


async def test_reupserting_a_running_scheduler_adds_no_run(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    """Issue 41 (defect 2): with a worker running, each unchanged upsert used to add a run
    at once; the next run stays where it was."""
    repeat, template = {"every": 60_000}, {"name": "tick"}
    first = await queue.upsert_job_scheduler("tick", repeat, template)
    assert first is not None
    worker = make_worker(lambda job: None)
    await Recorder(worker, "completed").wait("completed", 1)
    [due] = await queue.get_delayed()
    for _ in range(10):
        await queue.upsert_job_scheduler("tick", repeat, template)
    counts = await queue.get_job_counts("waiting", "active", "completed", "prioritized")
    assert sum(counts.values()) == 1
    assert [job.id for job in await queue.get_delayed()] == [due.id]
    await worker.close()


async def test_a_changed_every_reschedules_the_pending_run(queue: psyq.Queue) -> None:
    first = await queue.upsert_job_scheduler("s", {"every": 60_000, "start_date": now_ms() + 5000})
    again = await queue.upsert_job_scheduler("s", {"every": 30_000})
    assert first is not None and again is not None
    assert again.id != first.id
    assert [job.id for job in await pending(queue)] == [again.id]
