"""A Worker started by autorun runs in a task nobody awaits: when that run raises (a URL no
backend handles), its error reaches the `error` event, or the log when nobody listens."""

from __future__ import annotations

import asyncio
import logging

import pytest

import psyq


async def _stopped(worker: psyq.Worker) -> None:
    assert worker._running is not None
    await asyncio.gather(worker._running, return_exceptions=True)
    await asyncio.sleep(0)  # the task's done callbacks run


async def test_the_error_of_an_autorun_reaches_the_error_event() -> None:
    errors: list[BaseException] = []
    worker = psyq.Worker("q", lambda job: None, connection="nosuch://x")
    worker.on("error", errors.append)
    await _stopped(worker)
    assert [type(error) for error in errors] == [psyq.errors.InvalidURLError]
    assert "nosuch" in str(errors[0])
    await worker.close()


async def test_with_no_listener_it_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    worker = psyq.Worker("q", lambda job: None, connection="nosuch://x")
    with caplog.at_level(logging.ERROR, logger="psyq.worker"):
        await _stopped(worker)
    assert any("stopped" in r.message and "nosuch" in r.message for r in caplog.records)
    await worker.close()
