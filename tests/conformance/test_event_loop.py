"""The suite runs on the loop PSYQ_TEST_LOOP names (tests/conftest.py): this says it does."""

from __future__ import annotations

import asyncio
import os

import psyq
from tests.polling import Deadline


async def test_the_suite_runs_on_the_chosen_loop(queue: psyq.Queue) -> None:
    loop = asyncio.get_running_loop()
    if os.environ.get("PSYQ_TEST_LOOP", "asyncio") == "uvloop":
        import uvloop

        assert isinstance(loop, uvloop.Loop), loop
    else:
        assert type(loop).__module__.startswith("asyncio"), loop
    job = await queue.add("x", {"on": type(loop).__name__})
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.data == {"on": type(loop).__name__}


# A loop of calls runs until the side task has ticked TICKS times, for at most SECONDS (a
# count of calls would be no bound: on a fast, idle host 20,000 reads took under 30 ms, and
# the loop stopped before the side task's third 10 ms tick).
SECONDS = 2.0
TICKS = 3


async def test_a_loop_of_awaited_calls_lets_the_event_loop_turn(queue: psyq.Queue) -> None:
    """A loop of `await queue.add(...)` (or of reads) must give the event loop turns: the
    embedded stores answer without awaiting anything, and a loop of them starved every
    other task (a side task sleeping 10 ms ticked 0 times in 2.5 s, a Worker's lock renewal
    stalled and a peer took its job over: issue 49)."""
    ticks = 0

    async def side() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)  # sleep: the side task's tick
            ticks += 1

    task = asyncio.ensure_future(side())
    try:
        added, job = 0, None
        adding = Deadline("the side task's ticks during adds", SECONDS)
        while ticks < TICKS and not adding.passed():
            job = await queue.add("x", {"i": added})
            added += 1
        assert ticks >= TICKS, f"{added} adds, the side task ticked {ticks} times"
        assert job is not None
        ticks, read = 0, 0
        reading = Deadline("the side task's ticks during reads", SECONDS)
        while ticks < TICKS and not reading.passed():
            await queue.get_job(job.id)
            read += 1
        assert ticks >= TICKS, f"{read} reads, the side task ticked {ticks} times"
        print(f"{TICKS} ticks of the side task: after {added} adds, then after {read} reads")
    finally:
        task.cancel()
