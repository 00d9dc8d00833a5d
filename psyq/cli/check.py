"""`psyq check URL`: exit 0 when the store answers and psyq can use it; else print the
reason (unreachable, refused credentials, a schema newer than this psyq, an unknown URL,
a store that cannot take changes, a `sqlite:///` file that does not exist) and exit 1. For
scripts, init containers and probes of a store itself. It creates nothing: a missing SQLite
file is an answer (a typo, an unmounted volume), not a database to start."""

from __future__ import annotations

import asyncio
import os
import sys

from psyq.backends import open_backend, release_backend
from psyq.backends.sqlite.backend import parse_sqlite_url
from psyq.errors import InvalidURLError, PsyqError, redact_url

__all__ = ["run_check"]


def run_check(url: str, timeout: float) -> int:
    return asyncio.run(_check(url, timeout))


async def _check(url: str, timeout: float) -> int:
    shown = redact_url(url)
    try:
        kind = await asyncio.wait_for(_answers(url), timeout)
    except TimeoutError:
        print(f"psyq check: {shown}: no answer within {timeout:g}s", file=sys.stderr)
        return 1
    except Exception as exc:  # every reason a store cannot be used is the answer here
        print(f"psyq check: {shown}: {exc}", file=sys.stderr)
        return 1
    print(f"ok: {shown} ({kind}) answers")
    return 0


async def _answers(url: str) -> str:
    """Open the backend (which checks the server and its schema) and ask whether it can
    take changes (`check_ready`)."""
    _refuse_missing_file(url)
    backend = await open_backend(url)
    try:
        await backend.check_ready()
        return backend.kind
    finally:
        await release_backend(backend)


def _refuse_missing_file(url: str) -> None:
    """Raise when `url` is a sqlite:/// URL naming no file: opening it would create one."""
    if not url.lower().startswith("sqlite:"):
        return
    try:
        path = parse_sqlite_url(url)[0]
    except InvalidURLError:
        return  # opening it names the problem
    if not os.path.exists(path):
        raise PsyqError(
            f"{path}: no such file (psyq check creates nothing: the first process that opens "
            "a sqlite:/// URL creates its file)"
        )
