"""The views a hook sees (psyq.plugins.views) are what psyq's Job and Worker give: every
member of JobView and WorkerView reads on a real job and worker, with the same value."""

from __future__ import annotations

import inspect

import psyq
from psyq.plugins import JobView, WorkerView


def _members(view: type) -> list[str]:
    return [
        name
        for name, _ in inspect.getmembers(view, inspect.isdatadescriptor)
        if not name.startswith("_")
    ]


async def test_a_job_gives_every_member_of_job_view() -> None:
    queue = psyq.Queue("views", connection="memory://")
    job = await queue.add("send", {"to": "a@b.c"}, delay=5)
    view: JobView = job
    assert _members(JobView) == sorted(
        [
            "attempts_made",
            "attempts_started",
            "data",
            "delay",
            "id",
            "name",
            "opts",
            "processed_on",
            "queue_name",
            "timestamp",
        ]
    )
    for name in _members(JobView):
        assert getattr(view, name) == getattr(job, name)
    view.data = {"to": "d@e.f"}
    assert job.data == {"to": "d@e.f"}
    await queue.close()


async def test_a_worker_gives_every_member_of_worker_view() -> None:
    worker = psyq.Worker("views", connection="memory://", worker_name="w1")
    view: WorkerView = worker
    assert _members(WorkerView) == ["id", "name"]
    assert (view.name, view.id) == ("views", "w1")
    await worker.close()
