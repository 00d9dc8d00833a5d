"""Backend names as shorthand for URLs on the command line (docs/cli.md, "Backend names").

Wherever a command takes a URL it also takes a backend's bare name, resolved from the usual
environment:

    sqlite               PSYQ_URL when it is a sqlite URL, else sqlite:///psyq.db
    redis                REDIS_URL, else redis://localhost:6379/0
    postgres/postgresql  DATABASE_URL, else libpq's PGHOST, PGPORT, PGUSER, PGDATABASE
    psyq                 PSYQ_SERVER_URL, else psyq://localhost:6789
    memory               memory://

`resolve_cli_url` does the lookup; `resolve_cli_urls` applies it to every URL argument of a
parsed command line and prints each name it resolved (the password or token masked).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from typing import TextIO
from urllib.parse import quote, urlencode

from psyq.errors import redact_url

__all__ = ["BACKEND_NAMES", "URL_ARGUMENTS", "resolve_cli_url", "resolve_cli_urls"]


def _sqlite(env: Mapping[str, str]) -> str:
    url = env.get("PSYQ_URL", "")
    return url if url.lower().startswith("sqlite:") else "sqlite:///psyq.db"


def _redis(env: Mapping[str, str]) -> str:
    return env.get("REDIS_URL") or "redis://localhost:6379/0"


def _postgres(env: Mapping[str, str]) -> str:
    if env.get("DATABASE_URL"):
        return env["DATABASE_URL"]
    host, port = env.get("PGHOST", ""), env.get("PGPORT", "")
    user, database = env.get("PGUSER", ""), env.get("PGDATABASE", "")
    query = ""
    if host.startswith("/"):  # a unix socket folder: libpq's form is ?host=/path
        query, host = "?" + urlencode({"host": host}), ""
    netloc = quote(user, safe="") + "@" if user else ""
    netloc += host or ("" if query else "localhost")
    netloc += f":{port}" if port else ""
    return f"postgresql://{netloc}/{quote(database, safe='')}{query}"


def _psyq(env: Mapping[str, str]) -> str:
    return env.get("PSYQ_SERVER_URL") or "psyq://localhost:6789"


BACKEND_NAMES: dict[str, Callable[[Mapping[str, str]], str]] = {
    "sqlite": _sqlite,
    "redis": _redis,
    "postgres": _postgres,
    "postgresql": _postgres,
    "psyq": _psyq,
    "memory": lambda env: "memory://",
}

# command -> (argument attribute, option as typed) of every argument that holds a backend URL
URL_ARGUMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "demo": (("connection", "--connection"),),
    "worker": (("connection", "--connection"),),
    "inspect": (("connection", "--connection"),),
    "queue": (("connection", "--connection"),),
    "dashboard": (("connection", "--connection"),),
    "server": (("data", "--data"),),
    "migrate": (("source", "--from"), ("destination", "--to")),
    "export": (("url", "URL"),),
    "check": (("url", "URL"),),
    "enqueue": (("destination", "--to"),),
}


def resolve_cli_url(text: str, env: Mapping[str, str] | None = None) -> str:
    """The URL for `text`: a backend's bare name resolved from `env` (os.environ by
    default), anything else unchanged."""
    resolve = BACKEND_NAMES.get(text.strip().lower())
    return text if resolve is None else resolve(os.environ if env is None else env)


def resolve_cli_urls(args: argparse.Namespace, out: TextIO | None = None) -> None:
    """Replace each backend name among `args`' URL arguments by its URL, saying so on `out`
    (stderr by default, so that a command's own output, e.g. --json, stays clean)."""
    for attribute, option in URL_ARGUMENTS.get(args.command, ()):
        text = getattr(args, attribute, None)
        if text is None:
            continue
        url = resolve_cli_url(text)
        if url != text:
            setattr(args, attribute, url)
        if url != text and url != "memory://":  # what the environment made of a name
            print(
                f"psyq {args.command}: {option} {text} = {redact_url(url)}",
                file=out or sys.stderr,
                flush=True,
            )
