"""examples/fastapi run for real: uvicorn on uvloop serving the app, `psyq worker` processing
its jobs, on the default SQLite file (uvicorn's four processes and the worker share it: one
owns it, the others reach it through the owner), on SQLite through `psyq server`, Redis
and Postgres. A job added over HTTP has its
progress and its result streamed back as server-sent events."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name

from .procs import EXAMPLES, PSYQ, Proc

APP = EXAMPLES / "fastapi"


@pytest.fixture(params=["sqlite-shared", "sqlite-server", "redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite-shared":  # the default store: uvicorn's processes share it
        return f"sqlite:///{request.getfixturevalue('tmp_path')}/psyq.db"
    if request.param == "sqlite-server":
        return str(request.getfixturevalue("psyq_server_url"))  # its data: a SQLite file
    return BACKENDS[request.param](request)


@pytest.fixture
def app(url: str) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    env = {"PSYQ_URL": url, "PSYQ_QUEUE": fresh_name("reports")}
    argv = ["-m", "uvicorn", "app:app", "--loop", "uvloop", "--host", "127.0.0.1", "--port", "0"]
    processes = 4 if url.startswith("sqlite:") else 1  # four app processes share one file
    if processes > 1:
        argv += ["--workers", str(processes)]
    server = Proc([sys.executable, *argv], APP, env)
    try:
        line = server.wait_for("Uvicorn running on http://")
        server.wait_for_count("Application startup complete", processes)  # each is listening
        base = line.split("running on ", 1)[1].split()[0]
        with httpx.Client(base_url=base, timeout=30) as client:
            yield client, env
    finally:
        assert server.stop() in (0, -15), server.output()[-3000:]  # uvicorn re-raises SIGTERM
    assert "Application shutdown complete" in server.output()  # the lifespan closed the Queue


def events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) of a server-sent event stream."""
    name = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: ") and name is not None:
            yield name, json.loads(line[len("data: ") :])
            name = None


def start_worker(env: dict[str, str]) -> Proc:
    argv = [PSYQ, "worker", "tasks:report", "--queue", env["PSYQ_QUEUE"], "--concurrency", "2"]
    worker = Proc([*argv, "--connection", env["PSYQ_URL"]], APP, {})
    worker.wait_for("uvloop loop")  # psyq worker runs on uvloop when it is installed
    return worker


def test_progress_and_result_stream_as_server_sent_events(
    app: tuple[httpx.Client, dict[str, str]],
) -> None:
    client, env = app
    job_id = client.post("/jobs", json={"steps": 4, "pause": 0.02, "title": "q3"}).json()["id"]
    worker: Proc | None = None
    try:
        with client.stream("GET", f"/jobs/{job_id}/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = events(response)
            assert next(stream) == ("state", {"jobId": job_id, "state": "waiting", "progress": 0})
            worker = start_worker(env)  # the stream listens already: no progress is missed
            seen = list(stream)
        assert [name for name, _ in seen] == ["progress"] * 4 + ["completed"], seen
        assert [args["data"] for _, args in seen[:4]] == [25, 50, 75, 100]
        assert seen[-1][1]["returnvalue"] == {"pages": 4, "title": "q3"}
        assert all(args["jobId"] == job_id for _, args in seen)

        failing = client.post("/jobs", json={"steps": 1, "pause": 0, "fail": True}).json()["id"]
        with client.stream("GET", f"/jobs/{failing}/events") as response:
            last = list(events(response))[-1]
        assert last[0] == "failed"
        assert last[1]["failedReason"] == f"report {failing} failed on purpose"

        with client.stream("GET", f"/jobs/{job_id}/events") as response:  # finished already
            assert [name for name, _ in events(response)] == ["state", "completed"]
        assert client.get("/jobs/nope/events").status_code == 404
    finally:
        if worker is not None:
            assert worker.stop() == 0, worker.output()[-3000:]
