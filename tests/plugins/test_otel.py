"""TracePropagation on real Queues and Workers: the trace goes from producer to worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import psyq
from psyq.plugins.otel import TracePropagation
from tests.conformance.conftest import BACKENDS, Recorder
from tests.conftest import fresh_name
from tests.polling import eventually


@pytest.fixture(params=["memory", "sqlite", "psyq", "redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


async def run_jobs(url: str, name: str, plugin: Any, count: int, **add: Any) -> None:
    """Add one job (with `plugin` on the queue when given) and let a traced worker run it
    (and its retries) until `count` attempts ran."""
    plugins = [plugin] if add.pop("traced_add", True) else []
    async with psyq.Queue(name, connection=url, plugins=plugins) as queue:
        await queue.add("send", {"to": "a"}, **add)
        worker = psyq.Worker(name, processor(plugin.provider), connection=url, plugins=[plugin])
        rec = Recorder(worker, "completed", "failed")
        try:
            await eventually(
                lambda: len(rec.events["completed"]) + len(rec.events["failed"]) >= count,
                "the jobs run",
            )
        finally:
            await worker.close()


def processor(provider: TracerProvider) -> Any:
    """A processor that makes a span of its own (it should nest under the consumer span)."""

    async def process(job: psyq.Job) -> str:
        with provider.get_tracer("app").start_as_current_span("work"):
            if job.data.get("fail") and job.attempts_made == 0:
                raise RuntimeError("first attempt fails")
            return "sent"

    return process


async def test_the_worker_continues_the_producers_trace(url: str, traced: Any) -> None:
    provider, exporter = traced
    tracing = TracePropagation(provider)
    name = fresh_name("otel")
    with provider.get_tracer("app").start_as_current_span("request") as request:
        await run_jobs(url, name, tracing, 1)
    [create] = named(exporter, f"create {name}")
    [consume] = named(exporter, f"process {name}")
    [work] = named(exporter, "work")
    trace_id = request.get_span_context().trace_id
    assert create.kind == SpanKind.PRODUCER and create.parent is not None
    assert create.parent.span_id == request.get_span_context().span_id
    assert consume.kind == SpanKind.CONSUMER and consume.parent is not None
    assert consume.parent.span_id == create.context.span_id
    assert work.parent is not None and work.parent.span_id == consume.context.span_id
    assert {create.context.trace_id, consume.context.trace_id, work.context.trace_id} == {trace_id}
    assert consume.attributes is not None
    assert consume.attributes["messaging.system"] == "psyq"
    assert consume.attributes["messaging.destination.name"] == name
    assert consume.attributes["messaging.message.id"] == "1"
    assert consume.attributes["psyq.job.name"] == "send"


async def test_a_failed_attempt_is_an_error_span_and_the_retry_continues(
    url: str, traced: Any
) -> None:
    provider, exporter = traced
    name = fresh_name("otel")
    await _run_failing(url, name, provider)
    first, second = sorted(named(exporter, f"process {name}"), key=_attempt)
    assert first.status.status_code == StatusCode.ERROR
    assert [event.name for event in first.events] == ["exception"]
    assert second.status.status_code != StatusCode.ERROR
    [create] = named(exporter, f"create {name}")
    assert {span.parent.span_id for span in (first, second) if span.parent} == {
        create.context.span_id
    }


def _attempt(span: ReadableSpan) -> int:
    attempt = (span.attributes or {}).get("psyq.job.attempt", 0)
    assert isinstance(attempt, int), attempt
    return attempt


async def _run_failing(url: str, name: str, provider: TracerProvider) -> None:
    plugin = TracePropagation(provider)
    async with psyq.Queue(name, connection=url, plugins=[plugin]) as queue:
        await queue.add("send", {"fail": True}, attempts=2)
        worker = psyq.Worker(name, processor(provider), connection=url, plugins=[plugin])
        rec = Recorder(worker, "completed")
        try:
            await rec.wait("completed", 1, timeout=10)
        finally:
            await worker.close()


async def test_omit_context_and_untraced_jobs_start_new_traces(url: str, traced: Any) -> None:
    provider, exporter = traced
    tracing = TracePropagation(provider)
    omitted, plain = fresh_name("otel"), fresh_name("otel")
    with provider.get_tracer("app").start_as_current_span("request"):
        await run_jobs(url, omitted, tracing, 1, telemetry={"omitContext": True})
        await run_jobs(url, plain, tracing, 1, traced_add=False)
    assert named(exporter, f"create {omitted}") == [] == named(exporter, f"create {plain}")
    for name in (omitted, plain):
        [consume] = named(exporter, f"process {name}")
        assert consume.parent is None


def test_bad_metadata_is_ignored_not_fatal() -> None:
    from psyq.plugins.otel import _extract

    class FakeJob:
        def __init__(self, opts: dict[str, Any]) -> None:
            self.opts = opts

    for metadata in ("not json", "[1, 2]", None):
        job: Any = FakeJob({"telemetry": {"metadata": metadata}})
        assert dict(_extract(job)) == {}
