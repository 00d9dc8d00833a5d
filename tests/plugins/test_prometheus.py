"""PrometheusMetrics on real Queues and Workers, on every backend kind."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

import psyq
from psyq.plugins.prometheus import PrometheusMetrics
from tests.conformance.conftest import BACKENDS, Recorder, now_ms
from tests.conftest import fresh_name
from tests.polling import eventually


@pytest.fixture(params=["memory", "sqlite", "psyq", "redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


def value(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    found = registry.get_sample_value(metric, labels)
    return 0.0 if found is None else found


async def process(job: psyq.Job, token: str) -> Any:
    if job.name == "flaky" and job.attempts_made == 0:
        raise RuntimeError("first try fails")
    if job.name == "bad":
        raise RuntimeError("always fails")
    if job.name == "later":
        await job.move_to_delayed(now_ms() + 60_000, token)
        raise psyq.DelayedError()
    return "ok"


async def test_counts_and_times_what_queues_and_workers_do(url: str) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    name = fresh_name("prom")
    async with psyq.Queue(name, connection=url, plugins=[metrics]) as queue:
        await queue.add_bulk(
            [
                *({"name": job} for job in ("ok", "ok", "bad", "later")),
                {"name": "flaky", "opts": {"attempts": 2}},
            ]
        )
        worker = psyq.Worker(name, process, connection=url, plugins=[metrics], concurrency=2)
        rec = Recorder(worker, "completed", "failed")
        try:
            await rec.wait("completed", 3, timeout=10)
            await rec.wait("failed", 2, timeout=10)  # bad, and flaky's first attempt
            await eventually(lambda: _one_delayed(queue), "the job delayed")
        finally:
            await worker.close()
    ok, flaky, bad = (dict(queue=name, name=n) for n in ("ok", "flaky", "bad"))
    assert value(registry, "psyq_jobs_added_total", **ok) == 2
    assert value(registry, "psyq_jobs_added_total", queue=name, name="later") == 1
    assert value(registry, "psyq_jobs_completed_total", **ok) == 2
    assert value(registry, "psyq_jobs_completed_total", **flaky) == 1
    assert value(registry, "psyq_jobs_retried_total", **flaky) == 1
    assert value(registry, "psyq_jobs_failed_total", **flaky) == 0
    assert value(registry, "psyq_jobs_failed_total", **bad) == 1
    runs = "psyq_job_duration_seconds_count"
    assert value(registry, runs, **ok, outcome="completed") == 2
    assert value(registry, runs, **flaky, outcome="failed") == 1
    assert value(registry, runs, **flaky, outcome="completed") == 1
    assert value(registry, runs, queue=name, name="later", outcome="moved") == 1
    assert value(registry, "psyq_job_wait_seconds_count", **ok) == 2
    assert value(registry, "psyq_job_wait_seconds_sum", **ok) >= 0
    assert value(registry, "psyq_jobs_active", queue=name) == 0


async def _one_delayed(queue: psyq.Queue) -> bool:
    return (await queue.get_job_counts("delayed"))["delayed"] == 1


async def test_stalled_jobs_are_counted(url: str) -> None:
    registry = CollectorRegistry()
    name = fresh_name("prom")
    async with psyq.Queue(name, connection=url) as queue:
        await queue.add("x")
        lost = psyq.Worker(name, None, connection=url, autorun=False, lock_duration=50)
        checker = psyq.Worker(
            name, None, connection=url, autorun=False, plugins=[PrometheusMetrics(registry)]
        )
        try:
            assert await lost.get_next_job("gone", block=False) is not None
            await eventually(checker.check_stalled, "the lost job's lock expired, found stalled")
        finally:
            await lost.close(force=True)
            await checker.close()
    assert value(registry, "psyq_jobs_stalled_total", queue=name) == 1


def test_without_the_name_label_and_shared_per_registry() -> None:
    registry = CollectorRegistry()
    first = PrometheusMetrics(registry, job_name_label=False)
    second = PrometheusMetrics(registry, job_name_label=False)  # shares, does not clash
    assert first._m is second._m
    with pytest.raises(psyq.PsyqError, match="job_name_label=True"):
        PrometheusMetrics(registry, job_name_label=True)  # same names, other labels
    other = PrometheusMetrics(registry, namespace="jobs")
    assert other._m is not first._m


def test_a_taken_name_registers_nothing() -> None:
    registry = CollectorRegistry()
    Counter("jobs_stalled", "taken by the application", namespace="app", registry=registry)
    with pytest.raises(psyq.PsyqError, match="jobs_stalled"):
        PrometheusMetrics(registry, namespace="app")
    assert [m.name for m in registry.collect()] == ["app_jobs_stalled"]
