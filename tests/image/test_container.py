"""psyq's image, built as `make image` builds it (scripts/image: docker or podman, the
official Python base or the one made from Debian's packages), run as docs/operations.md's
compose file runs its `psyq` service: that service's command, token, volume, health check
and grace period, on the host's network with free loopback ports appended to the command
(the last `--port` and `--health-port` win).

From the host, through `psyq://`: jobs added and processed; then adds keep coming while the
container gets SIGTERM: it exits 0 and every add it acknowledged is stored; a new container
on the same volume finds them all. The build runs once per test run and is removed after it
(no image, base or volume is kept); the figures (build, ready, the whole test) are printed."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import psyq
from tests.image.container import Container, build, compose_service, remove, start
from tests.polling import eventually
from tests.redis_service import free_ports

pytestmark = pytest.mark.timeout(900)  # the build: a fresh Debian base and the wheelhouse
SERVICE = compose_service("psyq")
PROCESSED = 20


@pytest.fixture(scope="module")
def image() -> Iterator[tuple[str, str]]:
    """The image's tag and a data volume's name, both removed after the module."""
    mark = uuid.uuid4().hex[:8]
    tag, volume = f"localhost/psyq-test:{mark}", f"psyq-test-{mark}"
    try:
        print(f"image: built in {build(tag):.1f} s")
        yield tag, volume
    finally:
        remove(tag, volume)


def grace() -> int:
    return int(str(SERVICE["stop_grace_period"]).removesuffix("s"))


def health_check(health: int) -> list[str]:
    """The compose file's health check, against the probe port the container was given."""
    kind, *command = SERVICE["healthcheck"]["test"]
    assert kind == "CMD"
    return [part.replace("8080", str(health)) for part in command]


async def run_container(tag: str, volume: str, name: str) -> tuple[Container, float]:
    """A container of the compose service's values; it and the seconds until /readyz."""
    port, health = free_ports(2)
    argv = [*SERVICE["command"], "--port", str(port), "--health-port", str(health)]
    container = Container(name, port, health)
    began = time.monotonic()
    start(tag, name, volume, dict(SERVICE["environment"]), argv)
    ready = lambda: container.probe("/readyz") == 200 or not container.running()  # noqa: E731
    await eventually(ready, f"{name}'s /readyz", 60, interval=0.02)
    assert container.running(), container.logs()
    return container, time.monotonic() - began


def url(container: Container) -> str:
    token = SERVICE["environment"]["PSYQ_SERVER_TOKEN"]
    return f"psyq://:{token}@127.0.0.1:{container.port}?connect_timeout=5"


async def process(queue: psyq.Queue, connection: str) -> set[str]:
    """PROCESSED jobs added and run by a worker on the host; their ids."""
    jobs = await queue.add_bulk([{"name": "w", "data": {"i": i}} for i in range(PROCESSED)])
    done: set[str] = set()
    worker = psyq.Worker(queue.name, lambda job: asyncio.sleep(0), connection=connection)
    worker.on("completed", lambda job, result: done.add(job.id))
    try:
        await eventually(lambda: len(done) == PROCESSED, f"{PROCESSED} jobs completed", 30)
    finally:
        await worker.close()
    return {job.id for job in jobs}


async def add_until_stopped(queue: psyq.Queue, acked: list[str]) -> None:
    """Add one job after another, keeping the ids the server acknowledged."""
    while True:
        job = await asyncio.wait_for(queue.add("a", {"n": len(acked)}), 5)
        acked.append(job.id)


async def stop_under_adds(queue: psyq.Queue, container: Container) -> tuple[int, list[str]]:
    """SIGTERM while adds keep coming; the exit status and the acknowledged adds."""
    acked: list[str] = []
    adding = asyncio.ensure_future(add_until_stopped(queue, acked))
    await eventually(lambda: len(acked) >= 20 or adding.done(), "20 adds acknowledged", 30)
    status = await asyncio.to_thread(container.terminate, grace())
    adding.cancel()
    with contextlib.suppress(asyncio.CancelledError, psyq.PsyqError, OSError, TimeoutError):
        await adding
    return status, acked


async def states(connection: str, name: str, ids: list[str]) -> dict[str, str]:
    queue = psyq.Queue(name, connection=connection)
    try:
        return {job_id: await queue.get_job_state(job_id) for job_id in ids}
    finally:
        await queue.close()


async def test_the_image_drains_on_sigterm_and_keeps_its_jobs_on_its_volume(
    image: tuple[str, str], queue_name: str
) -> None:
    began = time.monotonic()
    tag, volume = image
    first, ready = await run_container(tag, volume, f"{volume}-a")
    try:
        print(f"image: ready {ready:.2f} s after `run`")
        checked = first.exec(*health_check(first.health))
        assert checked.returncode == 0, checked.stderr
        assert first.exec("id", "-u").stdout.strip() == "10001"
        queue = psyq.Queue(queue_name, connection=url(first))
        processed = await process(queue, url(first))
        status, acked = await stop_under_adds(queue, first)
        with contextlib.suppress(psyq.PsyqError, OSError, TimeoutError):
            await asyncio.wait_for(queue.close(), 5)
        assert status == 0, first.logs()
    finally:
        first.remove()
    second, _ = await run_container(tag, volume, f"{volume}-b")
    try:
        found = await states(url(second), queue_name, [*processed, *acked])
    finally:
        second.remove()
    expected: dict[str, Any] = {job_id: "completed" for job_id in processed}
    expected |= {job_id: "waiting" for job_id in acked}
    assert found == expected
    print(f"image: {len(acked)} adds acknowledged across SIGTERM, all stored;")
    print(f"image: the test (without the build) took {time.monotonic() - began:.1f} s")
