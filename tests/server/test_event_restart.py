"""A QueueEvents reading a `psyq server` whose event history starts again: a `--data memory`
server restarted, or a buffered SQLite server killed with kill -9 after events it had not
committed (their numbers are given out again after the restart). Every event of the new
history reaches the reader, `wait_job_finished` returns for every job that finished, and
the reader logs once that the history started again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import pytest

import psyq
from tests.polling import eventually
from tests.server.server_proc import ServerProcess, start_server

BEFORE, AFTER, WAITED = 120, 60, 10


def restarted(server: ServerProcess, log: Path, data: str, killed: bool) -> ServerProcess:
    server.kill9() if killed else server.stop()
    return start_server(log, "--data", data, port=server.port)


@pytest.mark.parametrize(
    ("store", "starts_again"),
    [("memory", True), ("sqlite-buffered-killed", True), ("sqlite-stopped", False)],
)
async def test_a_reader_follows_a_server_whose_history_starts_again(
    store: str,
    starts_again: bool,
    tmp_path: Path,
    queue_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stopped SQLite server keeps its history: the reader goes on from its id, logging
    nothing."""
    killed = store.endswith("killed")
    # buffered with a flush window that never passes: only the durable add below commits
    # (and a clean stop, which writes everything)
    data = "memory" if store == "memory" else f"sqlite:///{tmp_path}/jobs.db?flush_ms=600000"
    log = tmp_path / "server.log"
    server = start_server(log, "--data", data)
    names: list[str] = []
    events = psyq.QueueEvents(queue_name, connection=server.url)
    events.on("added", lambda args, event_id: names.append(args["name"]))
    events.on("error", lambda exc: None)  # the reads that fail while the server is down
    try:
        await events.wait_until_ready(10)
        async with psyq.Queue(queue_name, connection=server.url) as queue:
            await queue.add("committed", {}, durable=True)
            for i in range(BEFORE):  # numbers that a killed buffered server gives out again
                await queue.add(f"before-{i}", {})
        await eventually(lambda: len(names) == BEFORE + 1, f"{BEFORE + 1} events", timeout=15)
        server = await asyncio.to_thread(restarted, server, log, data, killed)
        caplog.set_level(logging.WARNING, logger="psyq")
        async with psyq.Queue(queue_name, connection=server.url) as queue:
            jobs = [await queue.add(f"after-{i}", {"i": i}) for i in range(AFTER)]
            waits = [
                asyncio.ensure_future(events.wait_job_finished(job.id, timeout=5))
                for job in jobs[:WAITED]
            ]
            with contextlib.suppress(AssertionError):  # the test reports what it read
                await eventually(lambda: len(names) >= BEFORE + 1 + AFTER, timeout=5)
            async with psyq.Worker(queue_name, double, connection=server.url):
                results = await asyncio.gather(*waits, return_exceptions=True)
        after = [name for name in names if name.startswith("after-")]
        finished = sum(result == 2 * i for i, result in enumerate(results))
        print(f"\n{store}: after the restart, 'added' read for {len(after)} of {AFTER} jobs, ")
        print(f"wait_job_finished returned for {finished} of {WAITED}")
        assert names[BEFORE + 1 :] == [f"after-{i}" for i in range(AFTER)]  # once, in order
        assert results == [2 * i for i in range(WAITED)]
        told = [r for r in caplog.records if "history started again" in r.getMessage()]
        assert len(told) == starts_again
    finally:
        await events.close()
        server.stop()


async def double(job: psyq.Job) -> int:
    return int(job.data["i"]) * 2
