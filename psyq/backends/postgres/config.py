"""The `postgresql://` URL: a libpq-style DSN plus psyq's own parameters.

    postgresql://user:password@host:5432/dbname?schema=bullmq&pool_min=1&pool_max=10

    schema            the Postgres schema holding the queues in BullMQ 6's layout, shared
                      with Node BullMQ 6 and bullmq for Python (created with BullMQ's own
                      migrations when missing; default `bullmq`, BullMQ's own default, as
                      its `schema` connection option; design record 0002)
    layout            `bullmq`, the only layout (accepted for URLs written while psyq had a
                      private one; that layout was retired before any release)
    prefix            accepted and checked, and otherwise unused, as Node BullMQ 6 ignores
                      its `prefix` option on Postgres: job keys are the layout's
                      `<queue>:<id>`, and the schema separates namespaces
    pool_min/pool_max size of the asyncpg pool
    application_name  shown in pg_stat_activity (default psyq)
    command_timeout   seconds a statement may take before the call fails (default 60)
    worker_ttl        seconds a worker's registry entry outlives its last heartbeat (30)
    announce_workers  `true` (default): each running worker holds one idle connection
                      named `<queue>:w:psyq`, so Node BullMQ's getWorkers lists it
                      (presence.py); `false` saves those connections
    settle_linger_ms  how long a worker's completion may wait, while its queue has no other
                      job waiting, to ride on the take the next job's arrival starts
                      (default 20; 0 commits every completion at once; psyq.core.settle_batch)
    events            the event policy this client stores with each queue it adds to
                      (`always` | `when-read`, psyq.rules.event_policy; unset: each queue
                      keeps what it has, `always` when nothing was stored; readers.py)

psyq's parameters are taken out before the DSN reaches asyncpg; any other query parameter
is passed on (asyncpg treats unknown ones as server settings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from psyq.errors import InvalidOptionsError, InvalidURLError
from psyq.rules.event_policy import check_event_policy
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["PostgresSettings", "parse_postgres_url"]

SCHEMES = ("postgres", "postgresql")
DEFAULTS = {
    "layout": "bullmq",
    "schema": "bullmq",
    "prefix": DEFAULT_PREFIX,
    "pool_min": "1",
    "pool_max": "10",
    "application_name": "psyq",
    "command_timeout": "60",
    "worker_ttl": "30",
    "announce_workers": "true",
    "settle_linger_ms": "20",
    "events": "",
}
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class PostgresSettings:
    dsn: str
    schema: str
    prefix: str
    pool_min: int
    pool_max: int
    application_name: str = "psyq"
    command_timeout: int = 60
    worker_ttl: int = 30
    announce_workers: bool = True
    settle_linger_ms: int = 20
    events: str | None = None  # the policy stored with each queue added to; None: none


def _whole(url: str, name: str, value: str, minimum: int) -> int:
    if not value.isdigit() or int(value) < minimum:
        raise InvalidURLError(url, f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def parse_postgres_url(url: str) -> PostgresSettings:
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise InvalidURLError(url, "a Postgres URL starts with postgresql:// or postgres://")
    ours = {**DEFAULTS}
    passed = []
    query = parse_qsl(parts.query, keep_blank_values=True)
    for key, value in query:
        if key in DEFAULTS:
            ours[key] = value
        else:
            passed.append((key, value))
    if ours["layout"] != "bullmq":
        raise InvalidURLError(
            url,
            f"layout {ours['layout']!r} is not known: queues are stored in BullMQ 6's "
            "layout (layout=bullmq, the default)",
        )
    if not _SCHEMA.fullmatch(ours["schema"]):
        raise InvalidURLError(
            url, f"schema must be a lower-case identifier [a-z_][a-z0-9_]*: {ours['schema']!r}"
        )
    prefix = ours["prefix"]
    if not prefix or ":" in prefix:
        raise InvalidURLError(url, f"prefix must be non-empty without ':', got {prefix!r}")
    pool_min = _whole(url, "pool_min", ours["pool_min"], 0)
    pool_max = _whole(url, "pool_max", ours["pool_max"], 1)
    if pool_min > pool_max:
        raise InvalidURLError(url, f"pool_min ({pool_min}) is above pool_max ({pool_max})")
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(passed), ""))
    timeout = _whole(url, "command_timeout", ours["command_timeout"], 1)
    worker_ttl = _whole(url, "worker_ttl", ours["worker_ttl"], 1)
    linger = _whole(url, "settle_linger_ms", ours["settle_linger_ms"], 0)
    app = ours["application_name"]
    announce = ours["announce_workers"].lower()
    if announce not in ("true", "false", "1", "0"):
        raise InvalidURLError(url, f"announce_workers must be true or false, got {announce!r}")
    return PostgresSettings(
        dsn,
        ours["schema"],
        prefix,
        pool_min,
        pool_max,
        app,
        timeout,
        worker_ttl,
        announce in ("true", "1"),
        linger,
        _events(url, ours["events"]),
    )


def _events(url: str, value: str) -> str | None:
    if not value:
        return None
    try:
        return check_event_policy(value)
    except InvalidOptionsError as exc:
        raise InvalidURLError(url, str(exc)) from None
