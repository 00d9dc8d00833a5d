"""`psyq inspect` and `psyq queue`: look at queues and act on them from a terminal.

    psyq inspect                               every queue: counts per state, paused
    psyq inspect emails [--state failed]       one queue: counts, workers, schedulers, jobs
    psyq inspect emails --job 42               one job, whole (with its logs)
    psyq queue retry emails --state failed     act on a queue (pause, resume, drain, ...)

Everything goes through the public `Queue` API and the backend's `list_queues`, so it works
on every backend. `--json` prints one JSON document instead of tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from rich import box
from rich.console import Console
from rich.table import Column, Table

import psyq
from psyq.backends import open_backend, release_backend, resolve_url
from psyq.backends.base import JOB_STATES, STATE_ORDER
from psyq.backends.sqlite import parse_sqlite_url
from psyq.cli.common import CliError, positive_int
from psyq.core.queue import CLEANABLE_STATES, FINISHED_STATES, qualify_connection
from psyq.rules.prefix import DEFAULT_PREFIX

__all__ = ["add_inspect_commands", "run_inspect", "run_queue_action"]

# Short column titles of the tables ("paused" jobs are counted in the waiting column).
TITLES = {"prioritized": "prio", "waiting-children": "children", "completed": "done"}
ACTIONS = ("pause", "resume", "drain", "clean", "retry", "promote", "remove", "obliterate")
# Actions that delete jobs or run finished ones again ask for --yes.
NEED_YES = frozenset({"drain", "clean", "obliterate", "retry"})


def add_inspect_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inspect = commands.add_parser("inspect", help="queues, their counts, jobs and workers")
    inspect.add_argument("queue", nargs="?", help="one queue (default: list every queue)")
    inspect.add_argument("--job", help="show this job whole")
    inspect.add_argument("--state", default="failed", help="jobs of this state (failed)")
    inspect.add_argument("--limit", type=positive_int, default=10, help="newest N jobs (10)")
    inspect.add_argument(
        "--groups", action="store_true", help="the queue's groups: counts and status"
    )
    _add_common(inspect)

    queue = commands.add_parser("queue", help="pause, resume, drain, clean, retry, ... a queue")
    queue.add_argument("action", choices=ACTIONS, help="what to do")
    queue.add_argument("queue", help="the queue")
    queue.add_argument("--job", help="remove: the job id")
    queue.add_argument("--state", help="clean: completed (default), failed, ...; retry: failed")
    queue.add_argument("--grace", type=int, default=0, help="clean: only jobs older (ms, 0)")
    queue.add_argument("--limit", type=int, default=0, help="clean: at most N jobs (0 = all)")
    queue.add_argument("--count", type=int, default=0, help="retry/promote: at most N (0 = all)")
    queue.add_argument("--delayed", action="store_true", help="drain: delayed jobs too")
    queue.add_argument("--force", action="store_true", help="obliterate: even with active jobs")
    queue.add_argument("--yes", action="store_true", help="confirm drain/clean/obliterate/retry")
    _add_common(queue)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connection", help="backend URL (default: PSYQ_URL or the default)")
    parser.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"key prefix ({DEFAULT_PREFIX})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run_inspect(args: argparse.Namespace) -> int:
    return asyncio.run(_with_queue_names(args, _inspect))


def run_queue_action(args: argparse.Namespace) -> int:
    if args.action in NEED_YES and not args.yes:
        raise CliError(f"{args.action} changes jobs for good: add --yes to go ahead")
    return asyncio.run(_with_queue_names(args, _act))


Command = Callable[[argparse.Namespace, list[str]], Awaitable[int]]


async def _with_queue_names(args: argparse.Namespace, command: Command) -> int:
    """Open the store once (it is shared with the Queues the command opens) and run."""
    _check_exists(args.connection)
    backend = await open_backend(qualify_connection(args.connection, args.prefix))
    try:
        names = sorted(await backend.list_queues())
        if args.queue is not None and args.queue not in names:
            known = ", ".join(names) or "none"
            raise CliError(f"no queue {args.queue!r} in this store (queues: {known})")
        return await command(args, names)
    finally:
        await release_backend(backend)


def _check_exists(connection: str | None) -> None:
    """Looking creates nothing: a SQLite URL must name a database file that exists."""
    url = resolve_url(connection)
    if urlsplit(url).scheme != "sqlite":
        return
    path, _settings = parse_sqlite_url(url)
    if not os.path.exists(path):
        raise CliError(f"no database at {path} ({url}); nothing was created")


def _queue(args: argparse.Namespace, name: str) -> psyq.Queue:
    return psyq.Queue(name, connection=args.connection, prefix=args.prefix)


# ---------------------------------------------------------------------- inspect
async def _inspect(args: argparse.Namespace, names: list[str]) -> int:
    if args.queue is None:
        _print(args, await _overview(args, names), _overview_table)
    elif args.job is not None:
        _print(args, await _job_view(args), _job_table)
    elif args.groups:
        _print(args, await _groups_view(args), _groups_table)
    else:
        _print(args, await _queue_view(args), _queue_tables)
    return 0


async def _counts(queue: psyq.Queue) -> dict[str, Any]:
    counts = await queue.get_job_counts(*STATE_ORDER)
    return {"name": queue.name, "paused": await queue.is_paused(), "counts": counts}


async def _overview(args: argparse.Namespace, names: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        async with _queue(args, name) as queue:
            rows.append(await _counts(queue))
    return rows


async def _queue_view(args: argparse.Namespace) -> dict[str, Any]:
    state = _check_state(args.state, JOB_STATES)
    async with _queue(args, args.queue) as queue:
        view = await _counts(queue)
        jobs = await queue.get_jobs([state], 0, args.limit - 1)
        view.update(
            workers=await queue.get_workers(),
            schedulers=await queue.get_job_schedulers(),
            state=state,
            jobs=[_job_line(job, state) for job in jobs],
        )
    return view


async def _groups_view(args: argparse.Namespace) -> dict[str, Any]:
    """The queue's first `--limit` groups by id, and how many there are in all."""
    async with _queue(args, args.queue) as queue:
        return {
            "name": queue.name,
            "count": await queue.get_groups_count(),
            "waiting": await queue.get_groups_job_count(),
            "groups": await queue.get_groups(0, args.limit - 1),
        }


def _job_line(job: psyq.Job, state: str) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "state": state,
        "attempts": job.attempts_made,
        "added": job.timestamp,
        "processed": job.processed_on,
        "finished": job.finished_on,
        "failed_reason": job.failed_reason,
    }


async def _job_view(args: argparse.Namespace) -> dict[str, Any]:
    async with _queue(args, args.queue) as queue:
        job = await queue.get_job(args.job)
        if job is None:
            raise CliError(f"no job {args.job!r} in queue {args.queue!r}")
        view = {"state": await job.get_state(), **job.to_dict()}
        view["logs"] = (await queue.get_job_logs(job.id))["logs"]
    return view


# ---------------------------------------------------------------------- queue actions
async def _act(args: argparse.Namespace, names: list[str]) -> int:
    async with _queue(args, args.queue) as queue:
        done = await _ACTIONS[args.action](queue, args)
    result = {"queue": args.queue, "action": args.action, **done}
    if args.json:
        print(json.dumps(result))
    else:
        details = ", ".join(f"{key} {value}" for key, value in done.items())
        print(f"{args.action} {args.queue}: {details or 'done'}")
    return 0


async def _pause(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    await queue.pause()
    return {"paused": True}


async def _resume(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    await queue.resume()
    return {"paused": False}


async def _drain(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    before = await queue.count()
    await queue.drain(delayed=args.delayed)
    return {"removed": before - await queue.count()}


async def _clean(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    state = _check_state(args.state or "completed", CLEANABLE_STATES)
    removed = await queue.clean(args.grace, args.limit, state)
    return {"removed": len(removed), "state": state}


async def _retry(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    state = _check_state(args.state or "failed", FINISHED_STATES)
    return {"retried": await queue.retry_jobs(state, args.count), "state": state}


async def _promote(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    return {"promoted": await queue.promote_jobs(args.count)}


async def _remove(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    if args.job is None:
        raise CliError("remove needs --job ID")
    if not await queue.remove(args.job):
        raise CliError(f"no job {args.job!r} in queue {queue.name!r} (or it is locked)")
    return {"removed": args.job}


async def _obliterate(queue: psyq.Queue, args: argparse.Namespace) -> dict[str, Any]:
    await queue.obliterate(force=args.force)
    return {"obliterated": True}


Action = Callable[[psyq.Queue, argparse.Namespace], Awaitable[dict[str, Any]]]
_ACTIONS: dict[str, Action] = {
    "pause": _pause,
    "resume": _resume,
    "drain": _drain,
    "clean": _clean,
    "retry": _retry,
    "promote": _promote,
    "remove": _remove,
    "obliterate": _obliterate,
}


def _check_state(state: str, allowed: tuple[str, ...]) -> str:
    if state not in allowed:
        raise CliError(f"unknown state {state!r} here; choose from {', '.join(allowed)}")
    return state


# ---------------------------------------------------------------------- printing
def _print(args: argparse.Namespace, value: Any, render: Callable[[Console, Any], None]) -> None:
    if args.json:
        print(json.dumps(value, default=str))
    else:
        render(_console(), value)


def _console() -> Console:
    """The terminal's width; piped into a file or a program, lines as wide as they need
    (up to 200 columns) rather than rows wrapped at 80."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _overview_table(console: Console, rows: list[dict[str, Any]]) -> None:
    if not rows:
        console.print("no queues")
        return
    shown = [state for state in STATE_ORDER if state != "paused"]
    titles = [TITLES.get(state, state) for state in shown]
    numbers = [Column(title, justify="right", no_wrap=True) for title in titles]
    widest = max(len(row["name"]) for row in rows)
    table = _table(Column("queue", min_width=min(widest, 40)), *numbers, "paused")
    for row in rows:
        counts = dict(row["counts"])
        counts["waiting"] += counts.pop("paused")  # one column: jobs waiting to be taken
        values = [str(counts[state]) for state in shown]
        table.add_row(row["name"], *values, "yes" if row["paused"] else "")
    console.print(table)


def _queue_tables(console: Console, view: dict[str, Any]) -> None:
    _overview_table(console, [view])
    console.print(f"workers: {len(view['workers'])}   schedulers: {len(view['schedulers'])}")
    times = [Column(title, no_wrap=True) for title in ("added", "processed", "finished")]
    table = _table("id", "name", "attempts", *times, "failed reason")
    table.title = f"newest {view['state']} jobs"
    for job in view["jobs"]:
        stamps = [_when(job[key]) for key in ("added", "processed", "finished")]
        table.add_row(
            job["id"], str(job["name"]), str(job["attempts"]), *stamps, job["failed_reason"] or ""
        )
    console.print(table)


def _groups_table(console: Console, view: dict[str, Any]) -> None:
    table = _table("group", "waiting", "active", "status")
    table.title = f"{view['count']} groups, {view['waiting']} jobs waiting in them"
    for group in view["groups"]:
        table.add_row(group["id"], str(group["waiting"]), str(group["active"]), group["status"])
    console.print(table)


def _job_table(console: Console, view: dict[str, Any]) -> None:
    table = _table("field", "value", show_header=False)
    for key, value in view.items():
        if key == "logs":
            continue
        shown = _when(value) if key in _STAMPS else json.dumps(value, default=str)
        table.add_row(key, shown)
    console.print(table)
    for line in view["logs"]:
        console.print(f"log: {line}", highlight=False)


def _table(*columns: str | Column, show_header: bool = True) -> Table:
    """A table with light rules, narrow enough for an 80-column terminal."""
    return Table(*columns, box=box.SIMPLE_HEAD, show_header=show_header, show_edge=False)


_STAMPS = frozenset({"timestamp", "processed_on", "finished_on"})


def _when(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%m-%d %H:%M:%S.%f")[:-3]
