"""What the pipeline needs to know about a backend URL before touching it.

- single owner: a `sqlite:///` file is locked by the one process that opens it, and
  `memory://` lives inside one process. Such a source is read by the driver; such a
  destination is written by one process at a time (one Spark task per wave).
- process bound: `memory://` cannot be a destination (a Spark task's process would take the
  jobs with it when it ends).
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlsplit

from psyq.backends.sqlite.backend import parse_sqlite_url
from psyq.errors import redact_url
from psyq_migrate.errors import MigrateError

__all__ = [
    "absolute_sqlite_url",
    "check_destination",
    "check_pair",
    "check_source",
    "default_batch_size",
    "is_single_owner",
    "sqlite_path",
]

SINGLE_OWNER = frozenset({"sqlite", "memory"})

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


def default_batch_size(destination: str) -> int:
    return POSTGRES_BATCH_SIZE if scheme(destination) in ("postgres", "postgresql") else BATCH_SIZE


def sqlite_path(url: str) -> str | None:
    """The file of a sqlite:// URL (None for other schemes)."""
    if scheme(url) != "sqlite":
        return None
    return os.path.realpath(parse_sqlite_url(url)[0])


def absolute_sqlite_url(url: str) -> str:
    """`url` with a relative SQLite path made absolute here: Spark tasks run in processes
    whose working folder is not the driver's (on a cluster, not even its machine)."""
    path = sqlite_path(url)
    if path is None or urlsplit(url).path.startswith("//"):
        return url
    parts = urlsplit(url)
    query = f"?{parts.query}" if parts.query else ""
    return f"sqlite:///{quote(path)}{query}"


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
