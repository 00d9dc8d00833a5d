"""Plugins on real Queues and Workers (memory://)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import psyq
from psyq.plugins import AddSpec, StructuredLogging, hookimpl
from tests.conformance.conftest import Recorder

URL = "memory://plugins"


class Quota:
    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> bool:
        return bool(spec.data.get("size", 0) < 10)


class Double:
    @hookimpl
    async def psyq_process(self, job: psyq.Job, call_next: Any) -> Any:
        return 2 * await call_next(job)


class BrokenOnComplete:
    @hookimpl
    def psyq_job_completed(self, job: psyq.Job, result: Any) -> None:
        raise RuntimeError(f"plugin broke on {job.id}")


async def test_a_veto_writes_nothing(queue_name: str) -> None:
    async with psyq.Queue(queue_name, connection=URL, plugins=[Quota()]) as queue:
        await queue.add("ok", {"size": 1})
        with pytest.raises(psyq.JobVetoedError):
            await queue.add_bulk(
                [{"name": "ok", "data": {"size": 2}}, {"name": "big", "data": {"size": 99}}]
            )
        assert await queue.count() == 1


async def test_onion_changes_the_result_and_a_broken_hook_is_reported(queue_name: str) -> None:
    async with psyq.Queue(queue_name, connection=URL) as queue:
        await queue.add_bulk([{"name": "n", "data": {"n": n}} for n in range(5)])

        async def process(job: psyq.Job) -> int:
            return int(job.data["n"])

        worker = psyq.Worker(
            queue_name, process, connection=URL, plugins=[Double(), BrokenOnComplete()]
        )
        events = Recorder(worker, "completed", "error")
        try:
            await events.wait("completed", 5)
            await events.wait("error", 5)
        finally:
            await worker.close()
        assert sorted(args[1] for args in events.events["completed"]) == [0, 2, 4, 6, 8]
        assert all("plugin broke" in str(args[0]) for args in events.events["error"])
        assert (await queue.get_job_counts("completed"))["completed"] == 5


async def test_structured_logging_records_the_life_of_a_job(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="psyq")
    plugin = StructuredLogging()
    async with psyq.Queue(queue_name, connection=URL, plugins=[plugin]) as queue:
        await queue.add("ok", {})
        await queue.add("bad", {}, attempts=2)

        async def process(job: psyq.Job) -> str:
            if job.name == "bad":
                raise ValueError("no")
            return "yes"

        worker = psyq.Worker(queue_name, process, connection=URL, plugins=[plugin])
        events = Recorder(worker, "completed", "failed")
        await events.wait("completed", 1)
        await events.wait("failed", 2)
        await worker.close()
    await asyncio.sleep(0)
    by_event: dict[str, list[logging.LogRecord]] = {}
    for record in caplog.records:
        by_event.setdefault(getattr(record, "psyq_event", "?"), []).append(record)
    assert len(by_event["added"]) == 2
    assert by_event["completed"][0].job_name == "ok"  # type: ignore[attr-defined]
    assert by_event["completed"][0].duration_ms >= 0  # type: ignore[attr-defined]
    assert by_event["retried"][0].levelno == logging.WARNING
    assert by_event["failed"][0].error == "ValueError('no')"  # type: ignore[attr-defined]
    assert by_event["failed"][0].attempts == 2  # type: ignore[attr-defined]
    assert {"worker_start", "worker_stop"} <= set(by_event)


class TenantGroups:
    """Puts each job in its tenant's group and records the groups hooks see."""

    def __init__(self) -> None:
        self.processed: list[Any] = []

    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> None:
        spec.opts["group"] = {"id": spec.data["tenant"]}

    @hookimpl
    def psyq_before_process(self, job: psyq.Job) -> None:
        self.processed.append(job.opts["group"])


async def test_a_plugin_groups_jobs_and_sees_their_group(queue_name: str) -> None:
    plugin = TenantGroups()
    async with psyq.Queue(queue_name, connection=URL, plugins=[plugin]) as queue:
        await queue.add_bulk([{"name": "n", "data": {"tenant": t}} for t in "aab"])
        with pytest.raises(psyq.InvalidOptionsError, match=r"group\.id"):
            await queue.add("bad", {"tenant": ""})  # the group a plugin set is checked too
        assert await queue.get_groups_job_count() == 3
        worker = psyq.Worker(queue_name, lambda job: None, connection=URL, plugins=[plugin])
        rec = Recorder(worker, "completed")
        await rec.wait("completed", 3)
        await worker.close()
    assert plugin.processed == [{"id": "a"}, {"id": "b"}, {"id": "a"}]  # round robin
