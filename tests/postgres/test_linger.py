"""Completions made while the queue is idle (its idle mark set: the last take found no
other job waiting) wait up to LINGER_MS for the next take, which completes them in its own
statement (postgres/linger.py). Whichever way they are settled (by the next take, alone
after the wait, or when the backend closes), each is settled once, with its return value,
and a completion the fast statement cannot do is refused as before."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from psyq.backends.base import Completed, FetchRequest, JobRecord, NewJob, Settlement
from psyq.backends.postgres import PostgresBackend

from .conftest import url_for


def request(n: int = 1) -> FetchRequest:
    return FetchRequest([uuid.uuid4().hex for _ in range(n)], 30_000, "w", None)


async def opened(server: str, schema: str) -> PostgresBackend:
    backend = PostgresBackend(url_for(server, schema))
    await backend.open()
    return backend


async def take_alone(backend: PostgresBackend, name: str) -> JobRecord:
    """Add one job and take it with room for more, then take again (nothing): the queue's
    idle mark is set (unless a notification arrives late: the tests hold either way)."""
    await backend.add_jobs("q", [NewJob(name, "{}", {})])
    # an earlier idle mark holds until the job's notification comes
    await backend.wait_for_job("q", 10_000)
    taken = await backend.move_to_active("q", request(5))
    assert [job.name for job in taken] == [name]
    assert await backend.move_to_active("q", request(5)) == []
    return taken[0]


def done(job: JobRecord, value: str = '"ok"') -> list[Settlement]:
    return [Settlement(job.id, job.lock_token or "", Completed(value))]


async def test_the_next_take_completes_a_lingering_completion(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = await opened(pg_server, fresh_schema())
    try:
        first = await take_alone(backend, "first")
        settling = asyncio.ensure_future(backend.settle_many("q", done(first), request()))
        await backend.add_jobs("q", [NewJob("second", "{}", {})])
        await backend.wait_for_job("q", 200)  # the notification, or 200 ms
        taken = await backend.move_to_active("q", request(5))
        errors, next_jobs = await asyncio.wait_for(settling, 10)
        assert errors == [None]
        # taken once: by the take that completed `first` (it waited), or by the settle's
        # own fetch-next (it did not: a late notification had cleared the idle mark)
        assert [job.name for job in [*taken, *next_jobs]] == ["second"]
        record = await backend.get_job("q", first.id)
        assert record is not None
        assert (record.state, record.returnvalue) == ("completed", '"ok"')
    finally:
        await backend.close()


async def test_a_lingering_completion_is_settled_alone_when_no_take_comes(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = await opened(pg_server, fresh_schema())
    try:
        jobs = [await take_alone(backend, f"job{i}") for i in range(2)]
        settled = await asyncio.wait_for(
            asyncio.gather(*(backend.settle_many("q", done(job), request()) for job in jobs)), 10
        )
        assert settled == [([None], []), ([None], [])]
        for job in jobs:
            record = await backend.get_job("q", job.id)
            assert record is not None and record.state == "completed"
        counts = await backend.get_job_counts("q", ["completed", "active"])
        assert counts == {"completed": 2, "active": 0}
    finally:
        await backend.close()


async def test_closing_the_backend_settles_lingering_completions(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    schema = fresh_schema()
    backend = await opened(pg_server, schema)
    job = await take_alone(backend, "last")
    settling = asyncio.ensure_future(backend.settle_many("q", done(job), request()))
    await asyncio.sleep(0)  # the settle has started (and waits)
    await backend.close()
    assert await asyncio.wait_for(settling, 10) == ([None], [])
    reader = await opened(pg_server, schema)
    try:
        record = await reader.get_job("q", job.id)
        assert record is not None and record.state == "completed"
    finally:
        await reader.close()


async def test_a_lingering_completion_with_a_lost_lock_is_refused(
    pg_server: str, fresh_schema: Callable[[], str]
) -> None:
    backend = await opened(pg_server, fresh_schema())
    try:
        job = await take_alone(backend, "held")
        wrong = [Settlement(job.id, "not-the-token", Completed('"x"'))]
        errors, records = await asyncio.wait_for(backend.settle_many("q", wrong, request()), 10)
        assert records == [] and len(errors) == 1 and errors[0] is not None
        record = await backend.get_job("q", job.id)
        assert record is not None and record.state == "active"
        assert await backend.settle_many("q", done(job), None) == ([None], [])
    finally:
        await backend.close()
