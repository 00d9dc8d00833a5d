"""The dashboard over real TCP: its JSON API, actions, guards and /metrics, on every backend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

import psyq
from psyq.dashboard.metrics import render_metrics
from psyq.dashboard.store import Store
from psyq.dashboard.web import HUB, create_app
from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name
from tests.polling import eventually
from tests.queues import FILLED_COUNTS, fill_queue

Client = Callable[..., Any]


@pytest.fixture(params=["memory", "sqlite", "psyq", "redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


@pytest.fixture
async def serve(url: str) -> AsyncIterator[Callable[..., Any]]:
    """serve(read_only=False, token=None) -> request(method, path, json=None, token=None)
    against a dashboard listening on a free port."""
    servers: list[TestServer] = []
    session = aiohttp.ClientSession()

    async def start(read_only: bool = False, token: str | None = None) -> Client:
        server = TestServer(create_app(Store(url), read_only=read_only, token=token))
        await server.start_server()
        servers.append(server)

        async def request(
            method: str, path: str, json: Any = None, auth: str | None = token
        ) -> Any:
            if method == "URL":
                return server.make_url(path)
            headers = {"Authorization": f"Bearer {auth}"} if auth else {}
            if method == "POST" and json is None:
                json = {}  # actions are JSON requests
            async with session.request(
                method, server.make_url(path), json=json, headers=headers
            ) as reply:
                if reply.content_type == "application/json":
                    return reply.status, await reply.json()
                return reply.status, await reply.text()

        return request

    try:
        yield start
    finally:
        await session.close()
        for server in servers:
            await server.close()


async def test_the_api_shows_what_the_store_holds(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    ids = await fill_queue(url, name, bad_name="<script>x</script>")
    request = await serve()
    status, queues = await request("GET", "/api/queues")
    assert status == 200
    row = next(q for q in queues if q["name"] == name)
    assert row["paused"] is False and row["workers"] == 0
    assert row["counts"] == FILLED_COUNTS
    status, page = await request("GET", f"/api/queues/{name}/jobs?state=waiting&start=0&end=0")
    assert status == 200 and page["total"] == 2 and [j["name"] for j in page["jobs"]] == ["b"]
    status, job = await request("GET", f"/api/queues/{name}/jobs/{ids['bad']}")
    assert status == 200 and job["state"] == "failed" and job["failed_reason"] == "boom"
    assert job["name"] == "<script>x</script>" and job["data"] == {"x": "<b>"}  # data, as is
    assert job["logs"] == ["tried once"]
    status, details = await request("GET", f"/api/queues/{name}")
    assert status == 200 and details["workers"] == [] and details["schedulers"] == []


async def test_unknown_things_and_bad_input_are_named(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    await fill_queue(url, name, bad_name="<script>x</script>")
    request = await serve()
    cases = [
        (f"/api/queues/{name}-nope", 404, f"{name}-nope"),
        (f"/api/queues/{name}/jobs/12345", 404, "12345"),
        (f"/api/queues/{name}/jobs?state=sleeping", 400, "sleeping"),
        (f"/api/queues/{name}/jobs?state=failed&start=x", 400, "'x'"),
        (f"/api/queues/{name}/jobs?state=failed&start=5&end=2", 400, "5..2"),
    ]
    for path, code, named in cases:
        status, body = await request("GET", path)
        assert (status, named in body["error"]) == (code, True), (path, body)
    status, body = await request("POST", f"/api/queues/{name}/clean", {"state": "active"})
    assert status == 400 and "active" in body["error"]


async def test_actions_change_the_store(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    ids = await fill_queue(url, name, bad_name="<script>x</script>")
    request = await serve()
    base = f"/api/queues/{name}"
    assert await request("POST", base + "/pause") == (200, {"paused": True})
    assert (await request("GET", base))[1]["paused"] is True
    assert await request("POST", base + "/resume") == (200, {"paused": False})
    assert await request("POST", base + "/retry", {"state": "failed"}) == (200, {"retried": 1})
    assert await request("POST", base + "/clean", {"state": "completed"}) == (200, {"removed": 1})
    assert (await request("POST", f"{base}/jobs/{ids['later']}/promote"))[0] == 200
    status, body = await request("POST", f"{base}/jobs/{ids['later']}/promote")
    assert status == 409 and ids["later"] in body["error"]  # no longer delayed
    assert (await request("POST", f"{base}/jobs/{ids['done']}/remove"))[0] == 404  # cleaned
    assert (await request("POST", f"{base}/jobs/{ids['later']}/remove"))[0] == 200
    async with psyq.Queue(name, connection=url) as queue:
        assert await queue.get_job_counts("waiting", "delayed", "completed", "failed") == {
            "waiting": 3,
            "delayed": 0,
            "completed": 0,
            "failed": 0,
        }


async def test_groups_are_listed_and_paused_one_by_one(url: str, serve: Any) -> None:
    name = fresh_name("dash-groups")
    async with psyq.Queue(name, connection=url) as queue:
        await queue.add_bulk([{"name": "j", "opts": {"group": {"id": g}}} for g in "abb"])
    request = await serve()
    base = f"/api/queues/{name}"
    status, view = await request("GET", base + "/groups")
    assert status == 200
    assert (view["count"], view["waiting"]) == (2, 3)
    assert [(g["id"], g["waiting"], g["status"]) for g in view["groups"]] == [
        ("a", 1, "waiting"),
        ("b", 2, "waiting"),
    ]
    assert (await request("GET", base + "/groups?start=1&end=1"))[1]["groups"][0]["id"] == "b"
    paused = await request("POST", base + "/groups/b/pause")
    assert paused == (200, {"group": "b", "paused": True, "changed": True})
    assert (await request("POST", base + "/groups/b/pause"))[1]["changed"] is False
    statuses = [g["status"] for g in (await request("GET", base + "/groups"))[1]["groups"]]
    assert statuses == ["waiting", "paused"]
    assert (await request("POST", base + "/groups/b/resume"))[1]["changed"] is True
    async with psyq.Queue(name, connection=url) as queue:
        assert await queue.resume_group("b") is False


async def test_actions_must_be_json_requests(url: str) -> None:
    """What a page on another site could make a browser send (a form or text/plain POST,
    without the token header) is refused, even on a dashboard without a token."""
    name = fresh_name("dash")
    await fill_queue(url, name)
    async with aiohttp.ClientSession() as session:
        server = TestServer(create_app(Store(url)))
        await server.start_server()
        try:
            path = server.make_url(f"/api/queues/{name}/pause")
            async with session.post(path, data="x", headers={"Content-Type": "text/plain"}) as r:
                assert r.status == 415 and "application/json" in (await r.json())["error"]
        finally:
            await server.close()
    async with psyq.Queue(name, connection=url) as queue:
        assert not await queue.is_paused()


async def test_read_only_refuses_actions(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    await fill_queue(url, name, bad_name="<script>x</script>")
    request = await serve(read_only=True)
    status, config = await request("GET", "/api/config")
    assert status == 200 and config["read_only"] is True and isinstance(config["now"], int)
    status, body = await request("POST", f"/api/queues/{name}/pause")
    assert status == 403 and "read-only" in body["error"]
    async with psyq.Queue(name, connection=url) as queue:
        assert not await queue.is_paused()


async def test_a_token_guards_every_call_but_the_page(url: str, serve: Any) -> None:
    request = await serve(token="s3cret")
    assert (await request("GET", "/api/queues", auth=None))[0] == 401
    assert (await request("GET", "/metrics", auth="wrong"))[0] == 401
    assert (await request("GET", "/api/queues"))[0] == 200
    status, page = await request("GET", "/", auth=None)
    assert status == 200 and '<script src="app.js">' in page


async def test_metrics_are_the_stored_counts(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    await fill_queue(url, name, bad_name="<script>x</script>")
    request = await serve()
    status, text = await request("GET", "/metrics")
    assert status == 200
    samples = parse_metrics(text)
    assert samples[("psyq_queue_jobs", (("queue", name), ("state", "waiting")))] == 2
    assert samples[("psyq_queue_jobs", (("queue", name), ("state", "failed")))] == 1
    assert samples[("psyq_queue_paused", (("queue", name),))] == 0
    assert samples[("psyq_queue_workers", (("queue", name),))] == 0


def test_label_values_are_escaped() -> None:
    name = 'a"b\\c\nd'
    text = render_metrics([{"name": name, "paused": True, "counts": {"waiting": 3}, "workers": 1}])
    assert 'psyq_queue_paused{queue="a\\"b\\\\c\\nd"} 1' in text.splitlines()
    samples = parse_metrics(text)
    assert samples[("psyq_queue_jobs", (("queue", name), ("state", "waiting")))] == 3


def test_the_page_never_renders_store_values_as_markup() -> None:
    script = resources.files("psyq.dashboard").joinpath("static", "app.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script
    assert "textContent" in script


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A small reader of the text format: (name, labels) -> value; HELP/TYPE lines checked."""
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert line.split()[1] in ("HELP", "TYPE"), line
            continue
        head, _, value = line.rpartition(" ")
        metric, _, labels = head.partition("{")
        samples[(metric, tuple(_labels(labels.removesuffix("}"))))] = float(value)
    return samples


def _labels(text: str) -> list[tuple[str, str]]:
    pairs, i = [], 0
    while i < len(text):
        key_end = text.index('="', i)
        key, i, value = text[i:key_end], key_end + 2, []
        while text[i] != '"':
            if text[i] == "\\":
                i += 1
                value.append({"n": "\n"}.get(text[i], text[i]))
            else:
                value.append(text[i])
            i += 1
        pairs.append((key, "".join(value)))
        i += 2  # the closing quote and the comma
    return pairs


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost:{port}", True),
        ("127.0.0.1:{port}", True),
        ("[::1]:{port}", True),
        ("LOCALHOST:{port}", True),
        ("evil.example:{port}", False),
        ("evil.example", False),
        ("localhost:{other}", False),
        ("localhost", False),  # port 80, not this one
        ("127.0.0.1.evil.example:{port}", False),
        ("localhost:notaport", False),
    ],
)
async def test_a_loopback_dashboard_without_a_token_refuses_foreign_hosts(
    tmp_path: Any, host: str, allowed: bool
) -> None:
    """DNS rebinding: a page on evil.example re-points its name at 127.0.0.1 and reads the
    dashboard as same-origin; its requests still say `Host: evil.example`. Sent over real TCP
    to a dashboard listening on 127.0.0.1, with that Host header."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    name = fresh_name("dash")
    await fill_queue(url, name)
    server = TestServer(create_app(Store(url)), host="127.0.0.1")
    await server.start_server()
    try:
        port = server.port
        assert port is not None
        header = host.format(port=port, other=port + 1)
        async with aiohttp.ClientSession() as session:
            for path in ("/", "/api/queues"):
                async with session.get(server.make_url(path), headers={"Host": header}) as r:
                    if allowed:
                        assert r.status == 200, (header, path)
                    else:
                        body = await r.json()
                        assert r.status == 403, (header, path)
                        assert "DNS rebinding" in body["error"] and header in body["error"]
            pause = server.make_url(f"/api/queues/{name}/pause")
            async with session.post(pause, json={}, headers={"Host": header}) as r:
                assert r.status == (200 if allowed else 403)
    finally:
        await server.close()
    async with psyq.Queue(name, connection=url) as queue:
        assert await queue.is_paused() is allowed


async def test_a_token_lets_other_host_names_in(tmp_path: Any) -> None:
    """Behind a reverse proxy the Host header is the site's name: with a token (which a page
    elsewhere does not have) any Host is served."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    server = TestServer(create_app(Store(url), token="s3cret"), host="127.0.0.1")
    await server.start_server()
    try:
        headers = {"Host": "dashboard.example.org", "Authorization": "Bearer s3cret"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(server.make_url("/api/queues"), headers=headers) as r,
        ):
            assert r.status == 200
    finally:
        await server.close()


async def test_metrics_search_and_promote_all(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    ids = await fill_queue(url, name)
    request = await serve()
    base = f"/api/queues/{name}"
    status, metrics = await request("GET", base + "/metrics?minutes=5")
    assert status == 200 and metrics["minutes"] == 5
    assert len(metrics["completed"]) == len(metrics["failed"]) == 5
    assert (sum(metrics["completed"]), sum(metrics["failed"])) == (1, 1)
    assert (metrics["completed_total"], metrics["failed_total"]) == (1, 1)
    status, body = await request("GET", base + "/metrics?minutes=0")
    assert status == 400 and "minutes" in body["error"]

    status, found = await request("GET", base + "/jobs?state=waiting&search=B")
    assert status == 200 and [job["name"] for job in found["jobs"]] == ["b"]
    assert found["total"] == 1 and found["scanned"] == 2 and found["all_scanned"] is True
    status, found = await request("GET", base + "/jobs?state=waiting&search=zzz")
    assert status == 200 and found["jobs"] == [] and found["total"] == 0

    assert await request("POST", base + "/promote") == (200, {"promoted": 1})
    async with psyq.Queue(name, connection=url) as queue:
        assert await queue.get_job_state(ids["later"]) == "waiting"


async def test_a_flow_is_shown_from_its_root(url: str, serve: Any) -> None:
    top, sub = fresh_name("flow-top"), fresh_name("flow-sub")
    async with psyq.FlowProducer(connection=url) as flows:
        root = await flows.add(
            {
                "name": "report",
                "queue_name": top,
                "children": [
                    {"name": "fetch", "queue_name": sub},
                    {
                        "name": "render",
                        "queue_name": sub,
                        "children": [{"name": "font", "queue_name": top}],
                    },
                ],
            }
        )
    font = root.children[1].children[0].job
    request = await serve()
    status, tree = await request("GET", f"/api/queues/{top}/jobs/{font.id}/flow")
    assert status == 200

    def shape(node: dict[str, Any]) -> Any:
        return (node["queue"], node["name"], node["state"], sorted(map(shape, node["children"])))

    assert shape(tree) == (
        top,
        "report",
        "waiting-children",
        [
            (sub, "fetch", "waiting", []),
            (sub, "render", "waiting-children", [(top, "font", "waiting", [])]),
        ],
    )
    status, job = await request("GET", f"/api/queues/{sub}/jobs/{root.children[0].job.id}")
    assert job["parent"] == {"queue": top, "id": root.job.id}


async def test_events_stream_what_happens_to_the_queue(url: str, serve: Any) -> None:
    """The page's live updates: `ready` once the reader has a fixed start, then an event for
    a job added after it."""
    name = fresh_name("dash")
    await fill_queue(url, name)
    request = await serve()
    assert (await request("GET", f"/api/queues/{name}-nope/events"))[0] == 404
    server_url = await request("URL", f"/api/queues/{name}/events")
    async with aiohttp.ClientSession() as session, session.get(server_url) as reply:
        assert reply.status == 200 and reply.content_type == "text/event-stream"
        first = await _next_message(reply)
        assert first == ("ready", {"queue": name})
        async with psyq.Queue(name, connection=url) as queue:
            job = await queue.add("fresh", None)
        seen: list[dict[str, Any]] = []
        while not any(event.get("jobId") == job.id for event in seen):
            kind, data = await asyncio.wait_for(_next_message(reply), 10)
            assert kind == "jobs" and data["count"] >= len(data["events"]) > 0
            seen += data["events"]
        assert {event["event"] for event in seen if event.get("jobId") == job.id} & {
            "added",
            "waiting",
        }


async def _next_message(reply: aiohttp.ClientResponse) -> tuple[str, dict[str, Any]]:
    """The next server-sent event of a stream (comments skipped): (event, data)."""
    lines: list[str] = []
    while True:
        line = (await reply.content.readline()).decode().rstrip("\n")
        if line:
            lines.append(line)
            continue
        fields = dict(entry.split(": ", 1) for entry in lines if not entry.startswith(":"))
        lines = []
        if fields:
            return fields["event"], json.loads(fields["data"])


async def test_an_active_job_can_be_cancelled(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    ids = await fill_queue(url, name)
    request = await serve()
    status, body = await request("POST", f"/api/queues/{name}/jobs/{ids['urgent']}/cancel")
    assert status == 409 and f"cannot cancel job {ids['urgent']!r}" in body["error"]
    status, body = await request("POST", f"/api/queues/{name}/jobs/nope/cancel")
    assert status == 404 and "nope" in body["error"]
    worker = psyq.Worker(name, None, connection=url, autorun=False)
    try:
        job = await worker.get_next_job("t", block=False)
        assert job is not None
        path = f"/api/queues/{name}/jobs/{job.id}/cancel"
        assert await request("POST", path) == (200, {"cancelled": job.id})
        async with psyq.Queue(name, connection=url) as queue:
            backend = await queue._open()
            assert await backend.get_cancelled(name, [job.id]) == {
                job.id: "cancelled from the dashboard"
            }
    finally:
        await worker.close()


async def test_shutting_down_ends_open_streams(url: str) -> None:
    """A tab left open does not hold the dashboard up when it stops."""
    name = fresh_name("dash")
    await fill_queue(url, name)
    server = TestServer(create_app(Store(url)))
    await server.start_server()
    async with aiohttp.ClientSession() as session:
        reply = await session.get(server.make_url(f"/api/queues/{name}/events"))
        try:
            assert await _next_message(reply) == ("ready", {"queue": name})
            await asyncio.wait_for(server.close(), 10)
            assert await asyncio.wait_for(reply.content.read(), 10) == b""  # the end
        finally:
            reply.close()


async def test_a_job_shows_its_newest_log_lines(url: str, serve: Any) -> None:
    name = fresh_name("dash")
    async with psyq.Queue(name, connection=url) as queue:
        job = await queue.add("chatty", None)
        for i in range(5):
            await job.log(f"line {i}")
    request = await serve()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("psyq.dashboard.store.MAX_LOGS", 3)
        status, shown = await request("GET", f"/api/queues/{name}/jobs/{job.id}")
    assert status == 200
    assert shown["logs"] == ["line 2", "line 3", "line 4"] and shown["logs_total"] == 5


async def test_a_closed_tab_lets_its_reader_go(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The queue's reader closes with the last stream; a tab that went away is noticed at
    the next event, without an error."""
    name = fresh_name("dash")
    await fill_queue(url, name)
    app = create_app(Store(url))
    server = TestServer(app)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            reply = await session.get(server.make_url(f"/api/queues/{name}/events"))
            assert (await _next_message(reply))[0] == "ready"
            assert list(app[HUB]._watches) == [name]
            reply.close()
        async with psyq.Queue(name, connection=url) as queue:
            await queue.add("after", None)
            await eventually(lambda: not app[HUB]._watches, timeout=10)
    finally:
        await server.close()
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []


async def test_the_page_files_and_their_headers(tmp_path: Any) -> None:
    """Every file of the page is served from the wheel; the page may load nothing from
    elsewhere, run no inline script, nor be framed by another site."""
    server = TestServer(create_app(Store(f"sqlite:///{tmp_path}/jobs.db")))
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            for path, kind in [
                ("/", "text/html"),
                ("/app.js", "text/javascript"),
                ("/app.css", "text/css"),
                ("/favicon.svg", "image/svg+xml"),
            ]:
                async with session.get(server.make_url(path)) as reply:
                    assert (reply.status, reply.content_type) == (200, kind), path
                    policy = reply.headers["Content-Security-Policy"]
                    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
                    assert "unsafe-inline" not in policy
                    assert reply.headers["X-Content-Type-Options"] == "nosniff"
                    # No address but the SVG namespace (a name, never fetched).
                    body = (await reply.text()).replace("http://www.w3.org/2000/svg", "")
                    assert "http://" not in body and "https://" not in body, path
    finally:
        await server.close()
