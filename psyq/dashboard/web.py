"""The dashboard's HTTP side (aiohttp): the page, the JSON API, `/metrics`, and the guards.

    GET  /                                    the page (static/: index.html, app.js, app.css)
    GET  /api/config                          {"read_only": bool, "now": ms}
    GET  /api/queues                          every queue: counts per state, paused, workers
    GET  /api/queues/{queue}                  one queue, with its workers and schedulers
    GET  /api/queues/{queue}/jobs?state=&start=&end=&search=    a page of jobs, newest first
    GET  /api/queues/{queue}/jobs/{id}        one job, whole, with its logs and parent
    GET  /api/queues/{queue}/jobs/{id}/flow   the flow the job is in, from its root down
    GET  /api/queues/{queue}/metrics?minutes= completed and failed per minute, oldest first
    GET  /api/queues/{queue}/events           server-sent events: the queue's QueueEvents
    POST /api/queues/{queue}/pause | resume | promote
    POST /api/queues/{queue}/retry            {"state": "failed"|"completed"}
    POST /api/queues/{queue}/clean            {"state": ..., "grace": ms, "limit": n}
    POST /api/queues/{queue}/jobs/{id}/retry | promote | remove | cancel
    GET  /metrics                             Prometheus text format 0.0.4

With a token, every request but the page's files (static/) needs `Authorization: Bearer <token>`
(the page takes it once from `?token=` and keeps it for the tab). Read-only refuses every
POST with 403; a POST that is not `application/json` gets 415 (other sites' pages cannot send
that type). Without a token, a request reaching a loopback socket must carry a loopback Host
header with this port (403 otherwise: DNS rebinding). Errors are JSON `{"error": ...}`: 400
bad input, 401/403/415 refused, 404 unknown queue or job, 409 wrong state, 503 store down.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from psyq.dashboard.live import EventHub, Inbox
from psyq.dashboard.metrics import render_metrics
from psyq.dashboard.store import NotFound, Store
from psyq.errors import (
    ConnectionError,
    InvalidOptionsError,
    JobNotFoundError,
    JobStateError,
    LockError,
    PsyqError,
)

__all__ = ["create_app"]

STORE: web.AppKey[Store] = web.AppKey("store", Store)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (NotFound, 404),
    (JobNotFoundError, 404),
    (InvalidOptionsError, 400),
    (JobStateError, 409),
    (LockError, 409),
    (ConnectionError, 503),
)


def create_app(
    store: Store, *, read_only: bool = False, token: str | None = None
) -> web.Application:
    """The dashboard for `store` (opened on startup, closed on cleanup)."""
    guards = [_guard(read_only, token), _errors]
    if token is None:
        guards.insert(0, _loopback_host_guard)
    app = web.Application(middlewares=guards)
    hub = EventHub(store)
    app[STORE] = store
    app[HUB] = hub
    app.on_startup.append(lambda app: store.open())
    app.on_shutdown.append(lambda app: hub.close())
    app.on_cleanup.append(lambda app: store.close())
    for path, (name, content_type) in STATIC.items():
        app.router.add_get(path, _page(name, content_type))
    app.router.add_get("/api/config", _config(read_only))
    app.router.add_get("/metrics", _metrics)
    _add_api(app.router)
    return app


def _add_api(router: web.UrlDispatcher) -> None:
    queue, job = "/api/queues/{queue}", "/api/queues/{queue}/jobs/{id}"
    router.add_get("/api/queues", _handler(lambda store, r: store.summaries()))
    router.add_get(queue, _handler(lambda store, r: store.details(_q(r))))
    router.add_get(queue + "/jobs", _jobs)
    router.add_get(job, _handler(lambda store, r: store.job(_q(r), r.match_info["id"])))
    router.add_get(job + "/flow", _handler(lambda store, r: store.flow(_q(r), r.match_info["id"])))
    router.add_get(queue + "/metrics", _metrics_of_queue)
    router.add_get(queue + "/events", _events)
    router.add_post(queue + "/pause", _handler(lambda store, r: store.pause(_q(r))))
    router.add_post(queue + "/resume", _handler(lambda store, r: store.resume(_q(r))))
    router.add_post(queue + "/promote", _handler(lambda store, r: store.promote_all(_q(r))))
    router.add_get(queue + "/groups", _groups)
    for action in ("pause", "resume"):
        router.add_post(f"{queue}/groups/{{group}}/{action}", _group_action(action))
    router.add_post(queue + "/retry", _retry_all)
    router.add_post(queue + "/clean", _clean)
    for action in ("retry", "promote", "remove", "cancel"):
        router.add_post(f"{job}/{action}", _job_action(action))


def _handler(call: Callable[[Store, web.Request], Awaitable[Any]]) -> Handler:
    """An aiohttp handler replying with what `call(store, request)` returns, as JSON."""

    async def handle(request: web.Request) -> web.Response:
        return _json(await call(request.app[STORE], request))

    return handle


def _config(read_only: bool) -> Handler:
    async def config(request: web.Request) -> web.Response:
        now = await request.app[STORE].now_ms()
        return _json({"read_only": read_only, "now": now})

    return config


def _q(request: web.Request) -> str:
    return request.match_info["queue"]


def _json(value: Any, status: int = 200) -> web.Response:
    return web.json_response(value, status=status, dumps=lambda v: json.dumps(v, default=str))


async def _jobs(request: web.Request) -> web.Response:
    state = request.query.get("state", "failed")
    start = _int(request.query, "start", 0)
    end = _int(request.query, "end", start + 19)
    search = request.query.get("search", "").strip()
    return _json(await request.app[STORE].jobs(_q(request), state, start, end, search))


async def _groups(request: web.Request) -> web.Response:
    start = _int(request.query, "start", 0)
    end = _int(request.query, "end", start + 19)
    return _json(await request.app[STORE].groups(_q(request), start, end))


def _group_action(action: str) -> Handler:
    async def act(request: web.Request) -> web.Response:
        store, group = request.app[STORE], request.match_info["group"]
        return _json(await store.group_action(_q(request), group, action))

    return act


async def _metrics_of_queue(request: web.Request) -> web.Response:
    minutes = _int(request.query, "minutes", 60)
    return _json(await request.app[STORE].metrics(_q(request), minutes))


# ---------------------------------------------------------------------- live events
KEEP_ALIVE = 10.0  # seconds between comments on a quiet stream (finds closed tabs, too)
BATCH_EVERY = 0.25  # a busy queue's events go out together, at most four messages a second
BATCH_SHOWN = 50  # events named in one message; the rest are only counted


HUB: web.AppKey[EventHub] = web.AppKey("hub", EventHub)

# What a stream says of an event: enough for the page to know what changed (it reads the
# rest through the API), never data or return values.
_EVENT_FIELDS = ("jobId", "prev")


async def _events(request: web.Request) -> web.StreamResponse:
    """`text/event-stream` of the queue's events: `ready` once reading has a fixed start
    (every later event reaches the stream), then `jobs` messages, each with the events that
    came since the last one: {"events": [{"event", "jobId", "prev"}...], "count": n}."""
    async with request.app[HUB].subscribe(_q(request)) as inbox:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        with contextlib.suppress(builtins.ConnectionError):  # the tab went away
            await response.write(_sse("ready", {"queue": _q(request)}))
            while await _send_batch(response, inbox):
                await asyncio.sleep(BATCH_EVERY)
        return response


async def _send_batch(response: web.StreamResponse, inbox: Inbox) -> bool:
    """Wait for events, then send what has come as one message; False at shutdown."""
    while True:
        try:
            first = await asyncio.wait_for(inbox.get(), KEEP_ALIVE)
            break
        except TimeoutError:
            await response.write(b": keep-alive\n\n")
    batch = [first]
    while not inbox.empty():
        batch.append(inbox.get_nowait())
    events = [item for item in batch if item is not None]
    if len(events) < len(batch):
        return False  # shutting down
    shown = [
        {"event": event, **{key: args[key] for key in _EVENT_FIELDS if key in args}}
        for event, args in events[:BATCH_SHOWN]
    ]
    await response.write(_sse("jobs", {"events": shown, "count": len(batch)}))
    return True


SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # a proxy in front must not hold events back
}


def _sse(event: str, value: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(value, default=str)}\n\n".encode()


async def _retry_all(request: web.Request) -> web.Response:
    body = await _body(request)
    state = body.get("state", "failed")
    return _json(await request.app[STORE].retry_all(_q(request), state))


async def _clean(request: web.Request) -> web.Response:
    body = await _body(request)
    store = request.app[STORE]
    state = body.get("state", "completed")
    done = await store.clean(_q(request), state, _int(body, "grace", 0), _int(body, "limit", 0))
    return _json(done)


def _job_action(action: str) -> Handler:
    async def act(request: web.Request) -> web.Response:
        store, job_id = request.app[STORE], request.match_info["id"]
        call = {
            "retry": store.retry_job,
            "promote": store.promote_job,
            "remove": store.remove_job,
            "cancel": store.cancel_job,
        }
        return _json(await call[action](_q(request), job_id))

    return act


async def _metrics(request: web.Request) -> web.Response:
    text = render_metrics(await request.app[STORE].summaries())
    return web.Response(body=text.encode(), headers={"Content-Type": METRICS_TYPE})


METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise InvalidOptionsError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidOptionsError(f"the request body must be a JSON object, got {body!r}")
    return body


def _int(source: Any, key: str, default: int) -> int:
    text = source.get(key, default)
    try:
        return int(text)
    except (TypeError, ValueError):
        raise InvalidOptionsError(f"{key} must be a whole number, got {text!r}") from None


def _page(name: str, content_type: str) -> Handler:
    body = resources.files("psyq.dashboard").joinpath("static", name).read_bytes()

    async def page(request: web.Request) -> web.Response:
        reply = web.Response(body=body, content_type=content_type, charset="utf-8")
        reply.headers.update(PAGE_HEADERS)
        return reply

    return page


# ---------------------------------------------------------------------- middlewares
@web.middleware
async def _loopback_host_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Without a token, a request that reached a loopback socket must name a loopback host
    and this port in its Host header. A page elsewhere can point its own name at 127.0.0.1
    (DNS rebinding) and then read this dashboard as same-origin; its requests still carry
    that name, and are refused here."""
    local = request.transport.get_extra_info("sockname") if request.transport else None
    host = request.headers.get("Host")
    if host is None or not local or not _is_loopback_address(local[0]):
        return await handler(request)
    if not _is_loopback_host(host, local[1]):
        return _json({"error": FOREIGN_HOST.format(host=host, port=local[1])}, 403)
    return await handler(request)


FOREIGN_HOST = (
    "Host {host!r} refused: this dashboard listens on a loopback address without a token, so "
    "it answers only requests for localhost:{port}, 127.0.0.1:{port} or [::1]:{port} "
    "(a guard against DNS rebinding); start it with --token to serve other host names"
)


def _is_loopback_address(text: str) -> bool:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _is_loopback_host(host: str, port: int) -> bool:
    """Whether a Host header names this machine's loopback (a name or an address) and `port`
    (80 when it names none)."""
    try:
        parts = urlsplit(f"//{host}")
        named_port = parts.port
    except ValueError:
        return False
    name = (parts.hostname or "").rstrip(".")
    loopback = name == "localhost" or _is_loopback_address(name)
    return loopback and (named_port or 80) == port


def _guard(read_only: bool, token: str | None) -> Any:
    """401 without the token (when one is set), 403 for a POST on a read-only dashboard."""
    expected = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is not None and not _has_token(request, expected):
            return _json({"error": "this dashboard needs its token"}, 401)
        if request.method != "GET":
            if read_only:
                return _json({"error": "this dashboard is read-only"}, 403)
            if request.content_type != "application/json":
                return _json({"error": NOT_JSON}, 415)
        return await handler(request)

    return guard


def _has_token(request: web.Request, expected: bytes) -> bool:
    if request.path in PUBLIC_PATHS:
        return True
    return hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected)


# A page elsewhere can make a browser POST here only as a "simple" request (no JSON type, no
# Authorization header): requiring JSON keeps cross-site requests out even without a token.
NOT_JSON = "actions need Content-Type: application/json"

# The page's files, served as they ship in the wheel (no CDN: the page works offline).
STATIC = {
    "/": ("index.html", "text/html"),
    "/app.js": ("app.js", "text/javascript"),
    "/app.css": ("app.css", "text/css"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}

# The page loads nothing from elsewhere, runs no inline script and cannot be framed (no
# clickjacking of its buttons).
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

# The page and its files hold no data (the script sends the token with every API call).
PUBLIC_PATHS = frozenset(STATIC)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """psyq errors become JSON replies with the status that fits; the message names the value."""
    try:
        return await handler(request)
    except PsyqError as exc:
        status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
        return _json({"error": str(exc)}, status)
