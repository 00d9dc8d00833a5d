"""The backend fixture of the conformance suite, and helpers every conformance test uses.

Every test in this folder runs once per backend in `BACKENDS`. A backend plugs in by adding
one entry: its id and a factory `(request) -> URL`. Factories for server backends use
`service_url` to find a server (env URL, then binaries on PATH) and fail with a message that
says what to install, or skip when PSYQ_REQUIRE_SERVICES=0.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import psyq
from tests.polling import eventually

UrlFactory = Callable[[pytest.FixtureRequest], str]


def memory_url(request: pytest.FixtureRequest) -> str:
    return "memory://"


def sqlite_url(durability: str, cache: int | None = None) -> UrlFactory:
    def factory(request: pytest.FixtureRequest) -> str:
        folder = request.getfixturevalue("tmp_path")
        extra = "" if cache is None else f"&cache={cache}"
        return f"sqlite:///{folder}/jobs.db?durability={durability}{extra}"

    return factory


def postgres_url(request: pytest.FixtureRequest) -> str:
    """The session's schema; PSYQ_PG_EVENTS=when-read stores that event policy with every
    queue the suite adds to (issue 52: its tests with a QueueEvents run with a reader, the
    rest without one)."""
    from tests.postgres.server import postgres_binaries, session_schema, start_postgres

    hint = "apt install postgresql, or set PSYQ_TEST_POSTGRES_URL"
    server = service_url(
        "postgres", "PSYQ_TEST_POSTGRES_URL", postgres_binaries(), start_postgres, hint
    )
    url = session_schema(server)
    events = os.environ.get("PSYQ_PG_EVENTS")
    if events:
        url += ("&" if "?" in url else "?") + f"events={events}"
    return url


def redis_url(request: pytest.FixtureRequest) -> str:
    return service_url(
        "redis",
        "PSYQ_TEST_REDIS_URL",
        ("redis-server",),
        lambda binary: request.getfixturevalue("redis_server")(binary),
        "apt install redis-server",
    )


def redis_cluster_url(request: pytest.FixtureRequest) -> str:
    """A local 3-node Redis Cluster (one per run); the prefix's hash tag puts every queue of
    the suite in one slot, so flows across queues work."""
    start: Callable[[], str] = request.getfixturevalue("redis_cluster")
    return start() + "?prefix={psyqtest}"


# id -> factory: every backend the suite runs on.
BACKENDS: dict[str, UrlFactory] = {
    "memory": memory_url,
    "redis": redis_url,
    "redis-cluster": redis_cluster_url,
    "sqlite": sqlite_url("buffered"),
    # durable with a cache of one record: every call commits, so every record not held in
    # memory leaves it at once and each read of a job is served from the file
    "sqlite-durable": sqlite_url("durable", cache=1),
    "psyq": lambda request: request.getfixturevalue("psyq_server_url"),
    "postgres": postgres_url,
}


def services_required() -> bool:
    """The services the README lists (Redis, Postgres, Java, Node): a missing one fails the
    test saying what to install, unless PSYQ_REQUIRE_SERVICES=0."""
    return os.environ.get("PSYQ_REQUIRE_SERVICES", "1") != "0"


def system_deps_required() -> bool:
    """What `make test` installs itself where it can (scripts/system-deps: Debian's chromium,
    as root with apt-get): a machine where it cannot skips the tests that need it, naming
    it, unless PSYQ_REQUIRE_SERVICES=1 is set, as CI sets it."""
    return os.environ.get("PSYQ_REQUIRE_SERVICES") == "1"


def service_url(
    service: str,
    env_var: str,
    binaries: tuple[str, ...],
    start: Callable[[str], str] | None,
    install_hint: str,
) -> str:
    """Find a server for `service`: the URL in `env_var`, else one started from the first of
    `binaries` found on PATH by `start(binary_path) -> url`. Otherwise fail, saying what to
    install, or skip (with the reason) when PSYQ_REQUIRE_SERVICES=0."""
    url = os.environ.get(env_var)
    if url:
        return url
    if start is not None:
        for binary in binaries:
            path = shutil.which(binary)
            if path:
                return start(path)
    reason = (
        f"no {service} server: set {env_var} to a URL or put {' or '.join(binaries)} on "
        f"PATH ({install_hint})"
    )
    if services_required():
        pytest.fail(f"{reason}; or set PSYQ_REQUIRE_SERVICES=0 to skip these tests")
    pytest.skip(reason)


@pytest.fixture(params=sorted(BACKENDS))
def backend_url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


# Every backend of the suite, and psyq:// over a server's in-memory engine as well: for the
# tests that the client side alone decides (bad input), where both server stores must agree.
WITH_TCP_MEMORY: dict[str, UrlFactory] = {
    **BACKENDS,
    "tcp-memory": lambda request: request.getfixturevalue("psyq_memory_server_url"),
}


@pytest.fixture(params=sorted(WITH_TCP_MEMORY))
def any_backend_url(request: pytest.FixtureRequest) -> str:
    return WITH_TCP_MEMORY[request.param](request)


@pytest.fixture
async def queue(backend_url: str, queue_name: str) -> AsyncIterator[psyq.Queue]:
    q = psyq.Queue(queue_name, connection=backend_url)
    try:
        yield q
    finally:
        await q.close()


WorkerFactory = Callable[..., psyq.Worker]


@pytest.fixture
async def make_worker(backend_url: str, queue_name: str) -> AsyncIterator[WorkerFactory]:
    """`make_worker(processor, **options)` -> a Worker on the test's queue, closed at the end
    (forcefully, so a hung processor cannot hang the teardown)."""
    workers: list[psyq.Worker] = []

    def factory(processor: Any = None, **options: Any) -> psyq.Worker:
        options.setdefault("connection", backend_url)
        worker = psyq.Worker(options.pop("name", queue_name), processor, **options)
        workers.append(worker)
        return worker

    try:
        yield factory
    finally:
        for worker in reversed(workers):
            await asyncio.wait_for(worker.close(force=True), 10)


async def queue_key(queue: psyq.Queue, name: str | None = None) -> str:
    """Queue `name` (default: the queue's own) as the queue's store names it in job keys and
    a `parent` option: `<prefix>:<name>` (BullMQ's Redis form; the URL's `prefix`, else
    `bull`), or `<name>` in BullMQ 6's Postgres layout. Asked of the store itself
    (`BackendAdapter.queue_key`), the one place a backend chooses the form."""
    backend = await queue._open()
    return backend.queue_key(queue.name if name is None else name)


async def job_key(queue: psyq.Queue, name: str, job_id: str) -> str:
    """The key of job `job_id` of queue `name` on the queue's store (see `queue_key`)."""
    return f"{await queue_key(queue, name)}:{job_id}"


async def wait_state(queue: psyq.Queue, job_id: str, state: str, timeout: float = 5) -> None:
    """Wait until the job is in `state`; on timeout, say which state it was in."""
    seen: list[str] = []

    async def reached() -> bool:
        seen.append(await queue.get_job_state(job_id))
        return seen[-1] == state

    try:
        await eventually(reached, f"job {job_id!r} in state {state!r}", timeout)
    except AssertionError as failed:
        raise AssertionError(f"{failed}: it is {seen[-1]!r}") from None


class Recorder:
    """Records a worker's (or queue's) events: `rec.events["completed"]` lists the args."""

    def __init__(self, emitter: Any, *events: str) -> None:
        self.events: dict[str, list[tuple[Any, ...]]] = {name: [] for name in events}
        for name in events:
            emitter.on(name, self._listener(name))

    def _listener(self, name: str) -> Callable[..., None]:
        return lambda *args: self.events[name].append(args)

    async def wait(self, event: str, count: int = 1, timeout: float = 5) -> list[tuple[Any, ...]]:
        """Wait until `event` was seen `count` times; return its calls."""
        await eventually(
            lambda: len(self.events[event]) >= count, f"{count} {event!r} events", timeout
        )
        return self.events[event]


def now_ms() -> int:
    return int(time.time() * 1000)


async def skip_if_unsupported(call: Awaitable[Any], feature: str) -> Any:
    """Run `call`; skip the test, naming the feature, when the backend does not support it."""
    try:
        return await call
    except psyq.UnsupportedError as exc:
        pytest.skip(f"{feature}: not supported by this backend yet ({exc})")


@pytest.fixture
async def flow_producer(backend_url: str) -> AsyncIterator[psyq.FlowProducer]:
    producer = psyq.FlowProducer(connection=backend_url)
    try:
        yield producer
    finally:
        await producer.close()


@pytest.fixture
async def queue_events(backend_url: str, queue_name: str) -> AsyncIterator[psyq.QueueEvents]:
    """QueueEvents on the test's queue, reading from the start of its event log."""
    events = psyq.QueueEvents(queue_name, connection=backend_url, last_event_id="0")
    try:
        yield events
    finally:
        await events.close()
