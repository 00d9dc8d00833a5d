"""A process that opens a `sqlite:///` file and then forks (run with `python -m`).

    python -m tests.sqlite.fork_procs URL CHILDREN ADDS [fork|pool]

The parent opens the file and adds one job, then forks CHILDREN children. Each child first
tries the Queue it inherited, an add then a read (`inherited [read] ok` or `inherited
[read] <error type>: <message>`), then opens the file again after the fork and adds ADDS
jobs one by one, printing `added ID` for each acknowledged one (`error <type>: <message>`
for a call that failed). The parent waits for every child, prints `parent added ID` for
its own adds, adds one more and closes.
`pool`: the children are a multiprocessing pool's (the fork start method), one task each.

    python -m tests.sqlite.fork_procs URL 1 ADDS outlive

The parent opens the file, adds one job and forks one child, then waits to be killed. The
child opens the file after the fork, adds ADDS jobs, prints `waiting for the parent`, and
once its parent is gone adds ADDS more (`added ID`, or `error ...`) and prints `role
owner|peer`.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys

import psyq
from psyq.backends.sqlite.backend import parse_sqlite_url
from psyq.backends.sqlite.lifecycle import is_open_here
from tests.polling import eventually


async def child(url: str, inherited: psyq.Queue, adds: int) -> None:
    try:
        await inherited.add("inherited", {})
        say("inherited ok")
    except psyq.PsyqError as exc:
        say(f"inherited {type(exc).__name__}: {exc}")
    try:
        say(f"inherited read ok {await inherited.get_job_counts()}")
    except psyq.PsyqError as exc:
        say(f"inherited read {type(exc).__name__}: {exc}")
    async with psyq.Queue("forked", connection=url) as queue:
        await add_each(queue, adds)


def say(line: str) -> None:
    """One write per line: lines of processes writing at once never interleave."""
    os.write(1, f"{line}\n".encode())


def fork_child(url: str, inherited: psyq.Queue, adds: int) -> int:
    """Fork a child that runs `child` and exits; its pid (in the parent)."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        asyncio.run(child(url, inherited, adds))
    except BaseException as exc:
        say(f"child failed {type(exc).__name__}: {exc}")
        code = 1
    os._exit(code)


def wait_for(pids: list[int]) -> list[int]:
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]


_INHERITED: list[psyq.Queue] = []  # what a pool's children inherit


def pool_task(url: str, adds: int) -> int:
    asyncio.run(child(url, _INHERITED[0], adds))
    return 0


def run_pool(url: str, children: int, adds: int) -> list[int]:
    with multiprocessing.get_context("fork").Pool(children) as pool:
        return pool.starmap(pool_task, [(url, adds)] * children, chunksize=1)


async def survive(url: str, parent: int, adds: int) -> None:
    async with psyq.Queue("forked", connection=url) as queue:
        await add_each(queue, adds)
        say("waiting for the parent")
        await eventually(lambda: os.getppid() != parent, "the parent killed by the test", 60)
        await add_each(queue, adds)
        role = "owner" if is_open_here(parse_sqlite_url(url)[0]) else "peer"
        say(f"role {role}")


async def add_each(queue: psyq.Queue, adds: int) -> None:
    for _ in range(adds):
        try:
            job = await queue.add("child", {})
        except psyq.PsyqError as exc:
            say(f"error {type(exc).__name__}: {exc}")
            continue
        say(f"added {job.id}")


async def outlive(url: str, adds: int) -> None:
    async with psyq.Queue("forked", connection=url) as queue:
        say(f"parent added {(await queue.add('parent', {})).id}")
        parent = os.getpid()
        if os.fork() == 0:
            code = 0
            try:
                asyncio.run(survive(url, parent, adds))
            except BaseException as exc:
                say(f"child failed {type(exc).__name__}: {exc}")
                code = 1
            os._exit(code)
        await asyncio.sleep(3600)  # sleep: until the test kills it


async def main(url: str, children: int, adds: int, how: str) -> None:
    if how == "outlive":
        return await outlive(url, adds)
    async with psyq.Queue("forked", connection=url) as queue:
        say(f"parent added {(await queue.add('parent', {})).id}")
        if how == "pool":
            _INHERITED.append(queue)
            codes = await asyncio.to_thread(run_pool, url, children, adds)
        else:
            pids = [fork_child(url, queue, adds) for _ in range(children)]
            codes = await asyncio.to_thread(wait_for, pids)  # the parent serves them
        say(f"children exited {codes}")
        say(f"parent added {(await queue.add('parent', {})).id}")


if __name__ == "__main__":
    how = sys.argv[4] if len(sys.argv) > 4 else "fork"
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), how))
