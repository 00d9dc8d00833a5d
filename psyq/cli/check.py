"""`psyq check URL`: exit 0 when the store answers and psyq can use it; else print the
reason (unreachable, refused credentials, a schema newer than this psyq, an unknown URL)
and exit 1. For scripts, init containers and probes of a store itself."""

from __future__ import annotations

import asyncio
import sys

from psyq.backends import open_backend, release_backend
from psyq.errors import redact_url

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
    """Open the backend (which checks the server and its schema) and read its clock."""
    backend = await open_backend(url)
    try:
        await backend.now_ms()
        return backend.kind
    finally:
        await release_backend(backend)
