"""`TracePropagation`: a job continues the trace of the code that added it (OpenTelemetry).

    tracing = TracePropagation()                 # the global tracer provider and propagator
    queue = psyq.Queue("emails", plugins=[tracing])
    worker = psyq.Worker("emails", send, plugins=[tracing])

At add, a PRODUCER span `create <queue>` is made under the current span and its context is
written into the job's `telemetry.metadata` option as BullMQ's telemetry integrations write it
(the propagator's fields as a JSON object: `{"traceparent": "00-..."}`), so Node BullMQ
workers with an OpenTelemetry integration continue it too, and the reverse. At processing,
the processor runs inside a CONSUMER span `process <queue>`, a child of that context; spans
the processor makes nest under it. Needs `pip install 'psyq[otel]'` (opentelemetry-api).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from psyq.errors import DelayedError, PsyqError, RateLimitError, WaitingChildrenError
from psyq.plugins.hookspecs import CallNext, hookimpl

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from psyq.plugins.views import AddSpec, JobView

__all__ = ["TracePropagation"]

SYSTEM = "psyq"
# Raised by a processor to move its job elsewhere: not an error of the run.
_MOVED = (DelayedError, WaitingChildrenError, RateLimitError)


class TracePropagation:
    """Producer spans at add, consumer spans around processing, the context in between
    carried in the job's `telemetry` option. A job added with `telemetry.omitContext` true
    starts a new trace when processed."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError:
            raise PsyqError(
                "TracePropagation needs opentelemetry-api: pip install 'psyq[otel]'"
            ) from None
        self.provider = tracer_provider
        self._tracer: Tracer = trace.get_tracer("psyq", tracer_provider=tracer_provider)

    @hookimpl
    def psyq_before_add(self, spec: AddSpec) -> None:
        telemetry = dict(spec.opts.get("telemetry") or {})
        if "metadata" in telemetry or telemetry.get("omitContext"):
            return  # the producer chose what the job carries
        span = self._tracer.start_span(
            f"create {spec.queue_name}",
            kind=_kind("PRODUCER"),
            attributes=_attributes(spec.queue_name, spec.name, "create"),
        )
        try:
            telemetry["metadata"] = json.dumps(_inject(span), separators=(",", ":"))
        finally:
            span.end()
        spec.opts["telemetry"] = telemetry

    @hookimpl
    async def psyq_process(self, job: JobView, call_next: CallNext) -> Any:
        from opentelemetry import trace

        attributes = _attributes(job.queue_name, job.name, "process")
        attributes["messaging.message.id"] = job.id
        attributes["psyq.job.attempt"] = job.attempts_made + 1
        with self._tracer.start_as_current_span(
            f"process {job.queue_name}",
            context=_extract(job),
            kind=_kind("CONSUMER"),
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await call_next(job)
            except _MOVED:
                raise
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
                raise


def _kind(name: str) -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind[name]


def _attributes(queue: str, job_name: Any, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": operation,
        "psyq.job.name": str(job_name),
    }


def _inject(span: Span) -> dict[str, str]:
    from opentelemetry import propagate, trace

    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def _extract(job: JobView) -> Context:
    """The producer's context from the job; an empty one (a new trace, whatever span was
    current where the worker started) when the job has none or asked for none. Metadata
    that is not a JSON object is ignored."""
    from opentelemetry import propagate
    from opentelemetry.context import Context

    telemetry = job.opts.get("telemetry")
    if not isinstance(telemetry, dict) or telemetry.get("omitContext"):
        return Context()
    try:
        carrier = json.loads(telemetry.get("metadata") or "{}")
    except (TypeError, ValueError):
        return Context()
    if not isinstance(carrier, dict):
        return Context()
    return propagate.extract({str(k): str(v) for k, v in carrier.items()}, context=Context())
