"""What the pipeline needs to know about a backend URL before touching it.

- single owner: a `sqlite:///` file is locked by the one process that opens it, and
  `memory://` lives inside one process. Such a source is read by the driver; such a
  destination is written by one process at a time (one Spark task per wave).
- process bound: `memory://` cannot be a destination (a Spark task's process would take the
  jobs with it when it ends).
- on a cluster: a file named by a relative path means another file in an executor's working
  folder, so such URLs are made absolute in the driver (`absolute_url`); and a file source or
  `memory://` is read by the driver under a non-local master (`tasks_can_read`): only a
  server backend is reachable from every executor.
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlsplit

from psyq.backends.sqlite import parse_sqlite_url
from psyq.errors import redact_url
from psyq_migrate.errors import MigrateError

__all__ = [
    "SERVER_SCHEMES",
    "absolute_url",
    "check_destination",
    "check_pair",
    "check_source",
    "default_batch_size",
    "is_local_master",
    "is_single_owner",
    "sqlite_path",
    "tasks_can_read",
]

SINGLE_OWNER = frozenset({"sqlite", "memory"})
# Backends every executor reaches by URL, wherever it runs (given a host it can resolve).
SERVER_SCHEMES = frozenset({"redis", "rediss", "postgres", "postgresql", "psyq"})
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})

# Jobs per page when not given. A Postgres import page costs a fixed few statements (its
# transaction, the taken-id check, the COPY, logs, links) whatever its size: 4,000 jobs a
# page spend ~20% less of the server's CPU than 1,000. A Redis import page is one script
# that holds the server for its whole run (~9 ms per 1,000 jobs), so its pages stay small.
BATCH_SIZE = 1000
POSTGRES_BATCH_SIZE = 4000


def scheme(url: str) -> str:
    found = urlsplit(url).scheme.lower()
    if not found:
        raise MigrateError(
            f"{redact_url(url)!r} is not a backend URL (expected e.g. sqlite:///jobs.db)"
        )
    return found


def is_single_owner(url: str) -> bool:
    return scheme(url) in SINGLE_OWNER


def is_local_master(master: str) -> bool:
    """Whether every Spark task runs on this machine, beside the driver (`local`,
    `local[N]`, `local[*]`, `local[N,F]`, `local-cluster[...]`)."""
    return master.strip().lower().startswith("local")


def _is_loopback(host: str | None) -> bool:
    return host is None or host.lower() in LOOPBACK or host.startswith("127.")


def tasks_can_read(url: str, master: str) -> bool:
    """Whether Spark tasks under `master` can read the backend at `url` themselves: any
    backend but `memory://` on a local master; only a server backend on a cluster, and not
    one named by a loopback host (localhost is another machine for a remote executor) unless
    the master is on this machine's loopback too."""
    kind = scheme(url)
    if is_local_master(master):
        return kind != "memory"
    if kind not in SERVER_SCHEMES:
        return False
    master_host = urlsplit(master).hostname  # None for yarn and the like: somewhere else
    on_loopback = master_host is not None and _is_loopback(master_host)
    return on_loopback or not _is_loopback(urlsplit(url).hostname)


def absolute_url(url: str) -> str:
    """`url` with a SQLite file's relative path made absolute (against this process's working
    folder), so a Spark task, whose working folder differs, opens the same file."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        return url
    path, _ = parse_sqlite_url(url)
    if os.path.isabs(path):
        return url
    query = f"?{parts.query}" if parts.query else ""
    return f"sqlite:///{quote(os.path.abspath(path))}{query}"


def default_batch_size(destination: str) -> int:
    return POSTGRES_BATCH_SIZE if scheme(destination) in ("postgres", "postgresql") else BATCH_SIZE


def sqlite_path(url: str) -> str | None:
    """The file of a sqlite:// URL (None for other schemes)."""
    if scheme(url) != "sqlite":
        return None
    return os.path.realpath(parse_sqlite_url(url)[0])


def check_source(url: str) -> None:
    """A SQLite source must exist (opening a missing file would create an empty one)."""
    path = sqlite_path(url)
    if path is not None and not os.path.exists(path):
        raise MigrateError(f"no such SQLite file: {path!r} (from {url!r})")


def check_destination(url: str) -> None:
    """Spark tasks write the destination: it cannot live inside one process, and a SQLite
    file's folder must exist (found now rather than in a task, after Spark started)."""
    path = sqlite_path(url)
    if path is not None and not os.path.isdir(os.path.dirname(path)):
        raise MigrateError(f"no folder {os.path.dirname(path)!r} for the SQLite file of {url!r}")
    if scheme(url) == "memory":
        raise MigrateError(
            f"cannot write into {url!r} from Spark tasks: memory:// lives inside one process and "
            "would vanish with the task that wrote it; use sqlite:/// or a server"
        )


def check_pair(source: str, destination: str) -> None:
    """Refuse pairs that cannot work, before anything is opened."""
    check_source(source)
    check_destination(destination)
    same_file = sqlite_path(source) is not None and sqlite_path(source) == sqlite_path(destination)
    if source == destination or same_file:
        raise MigrateError(
            f"source and destination are the same backend: {redact_url(destination)!r}"
        )
