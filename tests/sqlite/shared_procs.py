"""Subprocess programs for the shared-file tests (run with `python -m`)."""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import psyq
from psyq.backends.sqlite.backend import parse_sqlite_url
from psyq.backends.sqlite.lifecycle import is_open_here


async def add_until_stopped(url: str) -> None:
    """Add durable jobs one by one, printing `added ID` for each acknowledged one and
    `unknown ...` for a call that failed with the connection; SIGTERM ends it cleanly."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with psyq.Queue("shared", connection=url) as queue:
        await queue.count()
        role = "owner" if is_open_here(parse_sqlite_url(url)[0]) else "peer"
        print(f"ready {role}", flush=True)
        while not stop.is_set():
            try:
                job = await queue.add("x", {}, {"durable": True})
            except psyq.ConnectionError as exc:
                print(f"unknown {exc}", flush=True)
                continue
            print(f"added {job.id}", flush=True)


async def add_reporting(url: str) -> None:
    """Add durable jobs one by one, printing `added ID T` for each acknowledged one (T: the
    host's monotonic clock once the call returned) and `error TYPE: MESSAGE` for each call
    that failed (then a pause of 20 ms); SIGTERM ends it."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    queue = psyq.Queue("shared", connection=url)
    await queue.count()
    role = "owner" if is_open_here(parse_sqlite_url(url)[0]) else "peer"
    print(f"ready {role}", flush=True)
    while not stop.is_set():
        try:
            job = await queue.add("x", {}, {"durable": True})
        except psyq.PsyqError as exc:
            print(f"error {type(exc).__name__}: {exc}", flush=True)
            await asyncio.wait([asyncio.ensure_future(stop.wait())], timeout=0.02)
            continue
        print(f"added {job.id} {time.monotonic()}", flush=True)
    try:
        await queue.close()
    except psyq.PsyqError as exc:
        print(f"close {type(exc).__name__}: {exc}", flush=True)


async def add_buffered(url: str) -> None:
    """Add jobs one by one with the URL's durability, printing `added ID` for each (the
    parent kills us)."""
    async with psyq.Queue("shared", connection=url) as queue:
        while True:
            job = await queue.add("x", {})
            print(f"added {job.id}", flush=True)


async def add_and_work(url: str) -> None:
    """Add durable jobs one by one (`added ID T`, T the host's monotonic clock; `unknown
    ...` for a call that failed with the connection) and run them with a Worker (`done
    ID`); SIGTERM closes the worker, then the queue, as an app does."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def done(job: psyq.Job) -> None:
        print(f"done {job.id}", flush=True)

    queue = psyq.Queue("shared", connection=url)
    worker = psyq.Worker("shared", done, connection=url, concurrency=5)
    await queue.count()
    role = "owner" if is_open_here(parse_sqlite_url(url)[0]) else "peer"
    print(f"ready {role}", flush=True)
    while not stop.is_set():
        try:
            job = await queue.add("x", {}, {"durable": True})
        except psyq.ConnectionError as exc:
            print(f"unknown {exc}", flush=True)
            continue
        print(f"added {job.id} {time.monotonic()}", flush=True)
    await worker.close()
    await queue.close()


async def idle(url: str) -> None:
    """Open the file, print `ready owner|peer`, wait for SIGTERM, then close."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with psyq.Queue("shared", connection=url) as queue:
        await queue.count()
        role = "owner" if is_open_here(parse_sqlite_url(url)[0]) else "peer"
        print(f"ready {role}", flush=True)
        await stop.wait()


async def work_slowly(url: str, seconds: float) -> None:
    """Run the queue's jobs one at a time, each taking `seconds` (`start ID`, `done ID`),
    checking for stalled jobs every 200 ms; SIGTERM ends it."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def slow(job: psyq.Job) -> None:
        print(f"start {job.id}", flush=True)
        await asyncio.sleep(seconds)  # sleep: the job's work
        print(f"done {job.id}", flush=True)

    async with psyq.Worker("shared", slow, connection=url, stalled_interval=200):
        print("ready", flush=True)
        await stop.wait()


async def add_some(url: str, count: int) -> None:
    """Add `count` durable jobs (retrying a call whose outcome the owner's exit left
    unknown), print their ids and this process's role, and exit."""
    async with psyq.Queue("shared", connection=url) as queue:
        added = 0
        while added < count:
            try:
                job = await queue.add("x", {}, {"durable": True})
            except psyq.ConnectionError as exc:  # its owner exited meanwhile: a call in flight
                print(f"unknown {exc}", flush=True)
                continue
            print(f"added {job.id}", flush=True)
            added += 1
        role = "owner" if is_open_here(parse_sqlite_url(url)[0]) else "peer"
        print(f"role {role}", flush=True)


async def hold_active(url: str, count: int) -> None:
    """Add `count` jobs, start them all and never finish them; print `holding` (the parent
    kills us)."""
    started: list[str] = []

    async def forever(job: psyq.Job) -> None:
        started.append(job.id)
        if len(started) == count:
            print("holding", flush=True)
        await asyncio.sleep(3600)  # sleep: a job that never ends; the parent kills us

    async with psyq.Queue("shared", connection=url) as queue:
        await queue.add_bulk([{"name": "x", "data": {}} for _ in range(count)])
        async with psyq.Worker("shared", forever, connection=url, concurrency=count):
            await asyncio.sleep(3600)  # sleep: until the parent kills us


async def work(url: str) -> None:
    """Run the queue's jobs, printing `done ID` for each, checking for stalled jobs every
    200 ms; SIGTERM ends it."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def done(job: psyq.Job) -> None:
        print(f"done {job.id}", flush=True)

    async with psyq.Worker("shared", done, connection=url, concurrency=10, stalled_interval=200):
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    command, url, *rest = sys.argv[1:]
    if command == "load":
        asyncio.run(add_until_stopped(url))
    elif command == "hold":
        asyncio.run(hold_active(url, int(rest[0])))
    elif command == "work":
        asyncio.run(work(url))
    elif command == "each":
        asyncio.run(add_reporting(url))
    elif command == "fast":
        asyncio.run(add_buffered(url))
    elif command == "busy":
        asyncio.run(add_and_work(url))
    elif command == "idle":
        asyncio.run(idle(url))
    elif command == "slow":
        asyncio.run(work_slowly(url, float(rest[0])))
    else:
        asyncio.run(add_some(url, int(rest[0])))
