"""A FastAPI app that queues work for `psyq worker` and streams each job's progress.

    POST /jobs                 {"steps": 4}  ->  {"id": "1"}
    GET  /jobs/{id}/events     server-sent events: state, progress..., then completed or failed

The lifespan opens one Queue (to add jobs) and one QueueEvents (every process's progress and
results, read once and fanned out to the streams that asked). Run it with uvicorn, which
picks uvloop when it is installed, and the worker beside it (tasks.py):

    PSYQ_URL=redis://localhost:6379/0 uvicorn app:app --loop uvloop
    PSYQ_URL=redis://localhost:6379/0 psyq worker tasks:report --queue reports

PSYQ_URL is any psyq URL; left out, psyq's default file `sqlite:///psyq.db`, which the
app's processes (`uvicorn --workers 4`) and the worker share on one host: the first to open
it owns it and serves the others. `psyq://host:6789` reaches a `psyq server` from other
hosts, `postgresql://...` a database; PSYQ_QUEUE names the queue (reports).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse

import psyq

QUEUE = os.environ.get("PSYQ_QUEUE", "reports")
CONNECTION = os.environ.get("PSYQ_URL")  # None: psyq's default (PSYQ_URL, else sqlite)
FINAL = ("completed", "failed")


class JobFeeds:
    """One QueueEvents for the app; each stream gets the events of its job on a queue."""

    def __init__(self, events: psyq.QueueEvents) -> None:
        self.events = events
        self.feeds: dict[str, set[asyncio.Queue[tuple[str, dict[str, Any]]]]] = {}
        for name in ("progress", *FINAL):
            events.on(name, self._listener(name))

    def _listener(self, name: str) -> Any:
        def deliver(args: dict[str, Any], event_id: str) -> None:
            for feed in self.feeds.get(str(args.get("jobId")), ()):
                feed.put_nowait((name, args))

        return deliver

    @asynccontextmanager
    async def feed(self, job_id: str) -> AsyncIterator[asyncio.Queue[tuple[str, dict[str, Any]]]]:
        feed: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.feeds.setdefault(job_id, set()).add(feed)
        try:
            yield feed
        finally:
            self.feeds[job_id].discard(feed)
            if not self.feeds[job_id]:
                del self.feeds[job_id]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with psyq.Queue(QUEUE, connection=CONNECTION) as queue:
        events = psyq.QueueEvents(QUEUE, connection=CONNECTION)
        try:
            await events.wait_until_ready(timeout=30)
            app.state.queue, app.state.feeds = queue, JobFeeds(events)
            yield
        finally:
            await events.close()


app = FastAPI(lifespan=lifespan)


@app.post("/jobs")
async def add_job(body: dict[str, Any]) -> dict[str, str]:
    """Queue a report job; its data is the request body."""
    job = await app.state.queue.add("report", body, attempts=2)
    return {"id": job.id}


@app.get("/jobs/{job_id}/events")
async def job_events(job_id: str) -> StreamingResponse:
    """The job's state now, then its progress and its result as server-sent events."""
    if await app.state.queue.get_job(job_id) is None:
        raise HTTPException(404, f"no job {job_id!r} in queue {QUEUE!r}")
    return StreamingResponse(stream(job_id), media_type="text/event-stream")


async def stream(job_id: str) -> AsyncIterator[str]:
    async with app.state.feeds.feed(job_id) as feed:  # listening before the state is read:
        job = await app.state.queue.get_job(job_id)  # nothing falls between the two
        if job is None:  # removed since the request came in
            yield sse("removed", {"jobId": job_id})
            return
        state = await job.get_state()
        yield sse("state", {"jobId": job_id, "state": state, "progress": job.progress})
        if state in FINAL:
            yield sse(state, _final(job, state))
            return
        while True:
            name, args = await feed.get()
            yield sse(name, args)
            if name in FINAL:
                return


def _final(job: psyq.Job, state: str) -> dict[str, Any]:
    if state == "completed":
        return {"jobId": job.id, "returnvalue": job.returnvalue}
    return {"jobId": job.id, "failedReason": job.failed_reason}


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
