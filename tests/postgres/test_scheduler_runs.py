"""A job scheduler's runs in BullMQ's Postgres layout carry the options BullMQ's workers read
to add the following run (as psyq's runs on Redis do): the spec under `repeat` with the
run's number `count` and without `immediately`, `prevMillis` and `repeatJobKey`. A run
still holding `immediately`, or without `count`, made Node BullMQ's worker add the next run
at once and past the scheduler's limit (tests/interop's matrix saw it)."""

from __future__ import annotations

from collections.abc import Callable

import psyq
from tests.conftest import fresh_name
from tests.polling import eventually

from .conftest import url_for


async def _pending(queue: psyq.Queue) -> list[psyq.Job]:
    return await queue.get_jobs(["delayed", "waiting", "prioritized"])


async def test_runs_carry_their_number_and_not_immediately(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    url = url_for(pg_server, fresh_schema())
    name = fresh_name("runs")
    repeat = {"pattern": "0 0 1 1 *", "tz": "Europe/Berlin", "limit": 3, "immediately": True}
    async with psyq.Queue(name, connection=url) as queue:
        first = await queue.upsert_job_scheduler("s", repeat, {"name": "tick", "opts": {}})
        assert first is not None
        millis = int(first.id.rsplit(":", 1)[1])
        spec = {"pattern": "0 0 1 1 *", "tz": "Europe/Berlin", "limit": 3}
        assert first.opts["repeat"] == {**spec, "count": 1}
        assert first.opts["prevMillis"] == millis and first.opts["repeatJobKey"] == "s"
        worker = psyq.Worker(name, lambda job: None, connection=url, drain_delay=1)
        try:

            async def second_run() -> bool:
                return any(job.id != first.id for job in await _pending(queue))

            await eventually(second_run, "a second run")
        finally:
            await worker.close()
        [second] = [job for job in await _pending(queue) if job.id != first.id]
        second_millis = int(second.id.rsplit(":", 1)[1])
        assert second_millis > millis + 3600_000  # next new year's, not at once
        assert second.opts["repeat"] == {**spec, "count": 2}
        assert second.opts["prevMillis"] == second_millis
        assert second.opts["repeatJobKey"] == "s"


async def test_schedulers_list_their_template_data_as_compact_json(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    url = url_for(pg_server, fresh_schema())
    async with psyq.Queue(fresh_name("runs"), connection=url) as queue:
        template = {"name": "yearly", "data": {"k": "v", "n": [1, 2]}}
        await queue.upsert_job_scheduler("y", {"pattern": "0 0 1 1 *"}, template)
        backend = await queue._open()
        [stored] = await backend.get_job_schedulers(queue.name, 0, -1, False)
        assert stored["template"]["data"] == '{"k":"v","n":[1,2]}'  # as psyq's other stores
        [listed] = await queue.get_job_schedulers()  # and the Queue gives it as a value
        assert listed["template"]["data"] == {"k": "v", "n": [1, 2]}
