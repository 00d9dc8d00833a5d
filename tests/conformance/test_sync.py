"""The blocking facade, psyq.sync.Queue, used from plain functions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import psyq.sync


@pytest.fixture
def sync_queue(backend_url: str, queue_name: str) -> Iterator[psyq.sync.Queue]:
    queue = psyq.sync.Queue(queue_name, connection=backend_url)
    try:
        yield queue
    finally:
        queue.close()


def test_sync_add_and_get_job(sync_queue: psyq.sync.Queue) -> None:
    job = sync_queue.add("send", {"to": "a@b.c"}, attempts=2)
    assert job.name == "send"
    assert job.opts["attempts"] == 2
    stored = sync_queue.get_job(job.id)
    assert stored is not None
    assert stored.data == {"to": "a@b.c"}
    assert sync_queue.get_job("missing") is None


def test_sync_counts(sync_queue: psyq.sync.Queue) -> None:
    sync_queue.add("a")
    sync_queue.add("b", None, {"delay": 60_000})
    counts = sync_queue.get_job_counts("waiting", "delayed")
    assert counts == {"waiting": 1, "delayed": 1}
    assert sync_queue.count() == 2


def test_sync_pause_resume(sync_queue: psyq.sync.Queue) -> None:
    sync_queue.pause()
    assert sync_queue.is_paused() is True
    sync_queue.resume()
    assert sync_queue.is_paused() is False


def test_sync_add_bulk_and_get_jobs(sync_queue: psyq.sync.Queue) -> None:
    added = sync_queue.add_bulk([{"name": "a"}, {"name": "b"}])
    jobs = sync_queue.get_jobs(["waiting"], asc=True)
    assert [job.id for job in jobs] == [job.id for job in added]


def test_sync_job_methods(sync_queue: psyq.sync.Queue) -> None:
    job = sync_queue.add("a", None, delay=60_000)
    assert job.get_state() == "delayed"
    job.promote()
    assert job.get_state() == "waiting"
    job.log("row")
    assert sync_queue.get_job_logs(job.id) == {"logs": ["row"], "count": 1}


def test_sync_errors_are_psyq_errors(sync_queue: psyq.sync.Queue) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="bogus"):
        sync_queue.add("a", None, bogus=1)


def test_sync_queue_context_manager(backend_url: str, queue_name: str) -> None:
    with psyq.sync.Queue(queue_name, connection=backend_url) as queue:
        queue.add("a")
        assert queue.count() == 1
