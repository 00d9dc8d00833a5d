"""Job schedulers shared by Node BullMQ and psyq on one Redis: a scheduler made by either side
keeps producing its runs under the other side's workers, is listed, replaced and removed by
the other side."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from tests.conformance.conftest import wait_for
from tests.conftest import fresh_name
from tests.interop.conftest import Sides

pytestmark = pytest.mark.timeout(60)

DIRECTIONS = [("node", "psyq"), ("psyq", "node")]


def pair(sides: Sides, direction: tuple[str, str]) -> tuple[Any, Any]:
    """(the side that makes the scheduler, the side whose workers run it)."""
    by_name: dict[str, Any] = {"node": sides.node, "psyq": sides.psyq}
    return by_name[direction[0]], by_name[direction[1]]


def millis_of(job_ids: list[str]) -> list[int]:
    return sorted(int(job_id.rsplit(":", 1)[1]) for job_id in job_ids)


async def completed(side: Any, queue: str, count: int, timeout: float = 10) -> list[str]:
    async def enough() -> list[str] | None:
        ids: list[str] = await side.get_jobs(queue, ["completed"])
        return ids if len(ids) >= count else None

    result: list[str] = await wait_for(enough, timeout)
    return result


@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: f"{d[0]}-made-{d[1]}-runs")
async def test_every_keeps_running_on_the_other_side(
    sides: Sides, direction: tuple[str, str]
) -> None:
    maker, runner = pair(sides, direction)
    queue = fresh_name("sched")
    template = {"name": "tick", "data": {"n": 1}, "opts": {"attempts": 2}}
    first = await maker.upsert_scheduler(queue, "tick", {"every": 300}, template)
    assert first is not None and first.startswith("repeat:tick:")
    worker = await runner.start_worker(queue)
    ids = await completed(maker, queue, 3)
    errors = await runner.stop_worker(worker)
    assert errors == []
    assert all(b - a >= 300 for a, b in itertools.pairwise(millis_of(ids)))
    for side in (maker, runner):
        for job_id in ids:
            job = await side.job(queue, job_id)
            assert job is not None and job["state"] == "completed"
            assert job["name"] == "tick" and job["data"] == {"n": 1}
            assert job["opts"]["attempts"] == 2 and job["repeatJobKey"] == "tick"
            assert job["returnvalue"] == {"by": runner.name, "name": "tick"}
        [listed] = await side.schedulers(queue)
        assert listed["key"] == "tick" and listed["every"] == 300 and listed["name"] == "tick"
        assert listed["iterationCount"] >= 4
        pending = await side.get_jobs(queue, ["delayed", "waiting", "prioritized"])
        assert len(pending) == 1 and pending[0].startswith("repeat:tick:")


@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: f"{d[0]}-made-{d[1]}-runs")
async def test_cron_with_tz_limit_and_immediately(sides: Sides, direction: tuple[str, str]) -> None:
    maker, runner = pair(sides, direction)
    queue = fresh_name("sched")
    repeat = {"pattern": "* * * * * *", "tz": "Europe/Berlin", "limit": 2, "immediately": True}
    template = {"name": "cron", "data": {"steps": [{"return": "ok"}]}}
    first = await maker.upsert_scheduler(queue, "cron", repeat, template)
    assert first is not None
    worker = await runner.start_worker(queue)
    ids = await completed(maker, queue, 2)
    errors = await runner.stop_worker(worker)
    assert errors == []
    runs = millis_of(ids)
    assert runs[1] % 1000 == 0 and runs[1] > runs[0]  # the second run is on a whole second
    for side in (maker, runner):  # the limit: no third run, none pending
        assert len(await side.get_jobs(queue, ["completed"])) == 2
        assert await side.get_jobs(queue, ["delayed", "waiting", "prioritized"]) == []
        [listed] = await side.schedulers(queue)
        assert listed["pattern"] == "* * * * * *" and listed["tz"] == "Europe/Berlin"
        assert listed["limit"] == 2
        job = await side.job(queue, ids[0])
        assert job is not None and job["returnvalue"] == "ok"


@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: f"{d[0]}-made-{d[1]}-runs")
async def test_start_and_end_dates_and_template_opts(
    sides: Sides, direction: tuple[str, str]
) -> None:
    maker, runner = pair(sides, direction)
    queue = fresh_name("sched")
    start = int(time.time() * 1000) + 300
    end = start + 650
    repeat = {"every": 200, "startDate": start, "endDate": end}
    steps = [{"failUntil": 2}, {"log": "ran"}]
    opts = {"attempts": 3, "backoff": {"type": "fixed", "delay": 10}, "priority": 4}
    template = {"name": "dated", "data": {"steps": steps}, "opts": opts}
    first = await maker.upsert_scheduler(queue, "dated", repeat, template)
    assert first is not None and int(first.rsplit(":", 1)[1]) >= start
    worker = await runner.start_worker(queue)
    ids = await completed(maker, queue, 4)
    assert (await runner.stop_worker(worker)) == []
    runs = millis_of(ids)
    assert runs[0] >= start and runs[3] <= end
    for side in (maker, runner):
        for job_id in ids:
            job = await side.job(queue, job_id)
            assert job is not None and job["attemptsMade"] == 2 and job["priority"] == 4
            assert job["logs"] == ["ran"] and job["opts"]["backoff"] == opts["backoff"]


@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: f"{d[0]}-made-{d[1]}-changes")
async def test_upsert_list_and_remove_across(sides: Sides, direction: tuple[str, str]) -> None:
    maker, other = pair(sides, direction)
    queue = fresh_name("sched")
    template = {"name": "yearly", "data": {"k": "v"}}
    first = await maker.upsert_scheduler(queue, "y", {"pattern": "0 0 1 1 *"}, template)
    [listed] = await other.schedulers(queue)
    assert listed["key"] == "y" and listed["pattern"] == "0 0 1 1 *"
    assert listed["template"]["data"] in ({"k": "v"}, '{"k":"v"}')
    assert listed["next"] == int(str(first).rsplit(":", 1)[1])
    second = await other.upsert_scheduler(queue, "y", {"pattern": "0 0 1 6 *"}, {"name": "june"})
    for side in (maker, other):
        assert await side.get_jobs(queue, ["delayed", "waiting", "prioritized"]) == [second]
        [listed] = await side.schedulers(queue)
        assert listed["pattern"] == "0 0 1 6 *" and listed["name"] == "june"
    assert await other.remove_scheduler(queue, "y") in (True, False)
    for side in (maker, other):
        assert await side.schedulers(queue) == []
        assert await side.get_jobs(queue, ["delayed", "waiting", "prioritized"]) == []
