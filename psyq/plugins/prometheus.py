"""`PrometheusMetrics`: counters and histograms of what a process's Queues and Workers do.

    metrics = PrometheusMetrics()                      # the default prometheus_client registry
    worker = psyq.Worker("emails", send, plugins=[metrics])
    prometheus_client.start_http_server(9100)          # or any exposition prometheus_client has

A plain plugin on the public hooks. The figures are this process's (a Prometheus server sums
the processes it scrapes); a queue's stored counts per state are the dashboard's
`/metrics` (docs/dashboard.md). Needs `pip install 'psyq[prometheus]'`.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from psyq.errors import DelayedError, PsyqError, RateLimitError, WaitingChildrenError
from psyq.plugins.hookspecs import CallNext, hookimpl
from psyq.rules.conflicts import conflicts

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from psyq.plugins.views import JobView

__all__ = ["PrometheusMetrics"]

# Seconds: from 5 ms to 10 minutes, for job runs and for time spent waiting in the queue.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Exceptions that move a job elsewhere (delayed, waiting for children, rate-limited):
# the run ended without the job finishing or failing.
_MOVED = (DelayedError, WaitingChildrenError, RateLimitError)


@dataclass(frozen=True)
class _Metrics:
    added: Counter
    completed: Counter
    failed: Counter
    retried: Counter
    stalled: Counter
    duration: Histogram
    wait: Histogram
    active: Gauge
    conflicts: _Conflicts


class _Conflicts:
    """`<namespace>_store_conflicts_total{store, cause}`: the conflicts a store broke that
    this process ran again (a Postgres deadlock or serialization failure), read from
    psyq.rules.conflicts at each scrape: a backend counts them whether or not a Queue or
    Worker holding this plugin made the call."""

    def __init__(self, namespace: str) -> None:
        self.name = f"{namespace}_store_conflicts"

    def _family(self, counts: dict[tuple[str, str], int]) -> Any:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            self.name,
            "Store conflicts (deadlocks, serialization failures) run again by this process.",
            labels=["store", "cause"],
        )
        for (store, cause), count in sorted(counts.items()):
            family.add_metric([store, cause], count)
        return family

    def describe(self) -> list[Any]:
        return [self._family({})]

    def collect(self) -> list[Any]:
        return [self._family(conflicts.counts())]


# One set of metrics per registry, namespace and labels: a second plugin object on the same
# registry shares them (prometheus_client refuses a metric name registered twice).
_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, dict[tuple[str, bool], _Metrics]] = (
    weakref.WeakKeyDictionary()
)


class PrometheusMetrics:
    """Jobs added, completed, failed, retried and stalled; run and wait time; jobs running;
    store conflicts run again.

    `job_name_label=False` drops the `name` label (job names are chosen by producers: many
    distinct names make many time series)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        namespace: str = "psyq",
        job_name_label: bool = True,
    ) -> None:
        self.job_name_label = job_name_label
        self._m = _metrics_for(registry, namespace, job_name_label)

    def _labels(self, job: JobView) -> tuple[str, ...]:
        if self.job_name_label:
            return job.queue_name, str(job.name)
        return (job.queue_name,)

    @hookimpl
    def psyq_job_added(self, job: JobView) -> None:
        self._m.added.labels(*self._labels(job)).inc()

    @hookimpl
    def psyq_job_completed(self, job: JobView, result: Any) -> None:
        self._m.completed.labels(*self._labels(job)).inc()

    @hookimpl
    def psyq_job_failed(self, job: JobView, error: BaseException) -> None:
        self._m.failed.labels(*self._labels(job)).inc()

    @hookimpl
    def psyq_job_retried(self, job: JobView, error: BaseException, delay: int) -> None:
        self._m.retried.labels(*self._labels(job)).inc()

    @hookimpl
    def psyq_job_stalled(self, queue_name: str, job_id: str) -> None:
        self._m.stalled.labels(queue_name).inc()

    @hookimpl
    async def psyq_process(self, job: JobView, call_next: CallNext) -> Any:
        """Time the run (outcome completed, failed or moved) and count it as running."""
        labels = self._labels(job)
        self._observe_wait(job, labels)
        active = self._m.active.labels(job.queue_name)
        active.inc()
        started = time.perf_counter()
        outcome = "failed"
        try:
            result = await call_next(job)
            outcome = "completed"
            return result
        except _MOVED:
            outcome = "moved"
            raise
        finally:
            active.dec()
            self._m.duration.labels(*labels, outcome).observe(time.perf_counter() - started)

    def _observe_wait(self, job: JobView, labels: tuple[str, ...]) -> None:
        """From when the job was due (added + delay) to when a worker took it."""
        if job.processed_on is None:
            return
        due = job.timestamp + (job.delay or 0)
        self._m.wait.labels(*labels).observe(max(0, job.processed_on - due) / 1000)


def _metrics_for(registry: CollectorRegistry | None, namespace: str, by_name: bool) -> _Metrics:
    try:
        import prometheus_client as prom
    except ImportError:
        raise PsyqError(
            "PrometheusMetrics needs prometheus_client: pip install 'psyq[prometheus]'"
        ) from None
    registry = registry if registry is not None else prom.REGISTRY
    made = _SHARED.setdefault(registry, {})
    if (namespace, by_name) not in made:
        try:
            made[namespace, by_name] = _register(_create(namespace, by_name), registry)
        except ValueError as exc:  # the names are taken (e.g. with the other labels)
            raise PsyqError(
                f"PrometheusMetrics(namespace={namespace!r}, job_name_label={by_name}) cannot "
                f"register its metrics in this registry: {exc}"
            ) from exc
    return made[namespace, by_name]


def _register(metrics: _Metrics, registry: CollectorRegistry) -> _Metrics:
    """Register every metric, or none: a name already taken unregisters those before it."""
    done = []
    try:
        for field in fields(metrics):
            registry.register(getattr(metrics, field.name))
            done.append(getattr(metrics, field.name))
    except ValueError:
        for metric in done:
            registry.unregister(metric)
        raise
    return metrics


def _create(namespace: str, by_name: bool) -> _Metrics:
    """The metrics, registered nowhere yet."""
    from prometheus_client import Counter, Gauge, Histogram

    job = ["queue", "name"] if by_name else ["queue"]

    def counter(name: str, text: str, labels: list[str]) -> Counter:
        return Counter(name, text, labels, namespace=namespace, registry=None)

    def histogram(name: str, text: str, labels: list[str]) -> Histogram:
        return Histogram(name, text, labels, namespace=namespace, registry=None, buckets=BUCKETS)

    return _Metrics(
        added=counter("jobs_added", "Jobs added by this process.", job),
        completed=counter("jobs_completed", "Jobs this process's workers completed.", job),
        failed=counter("jobs_failed", "Jobs that failed for good in this process.", job),
        retried=counter("jobs_retried", "Failed attempts that will run again.", job),
        stalled=counter("jobs_stalled", "Jobs whose lock expired (back to waiting).", ["queue"]),
        duration=histogram("job_duration_seconds", "Time in the processor.", [*job, "outcome"]),
        wait=histogram("job_wait_seconds", "From due (added + delay) to taken.", job),
        active=Gauge(
            "jobs_active",
            "Jobs running in this process's workers.",
            ["queue"],
            namespace=namespace,
            registry=None,
        ),
        conflicts=_Conflicts(namespace),
    )
