"""A normal interpreter exit writes the buffered changes of every open file (issue 49).

A script that returns from `asyncio.run(main())` without closing its Queue lost its last
adds on the default buffered `sqlite:///` (exit code 0, nothing logged): the writer's timer
thread is a daemon and dies with the interpreter. The Database's exit hook flushes every
file still open, whatever layer opened it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import asyncio, sys
import psyq

async def main(url, count):
    queue = psyq.Queue("exit", connection=url)  # never closed
    for i in range(count):
        await queue.add("x", {"i": i})
    last = psyq.Queue("exit-done", connection=url)  # nor this one
    job = await last.add("y", {})
    print("added", job.id, flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def _stored(path: Path, queue: str) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM jobs WHERE queue = ?", (queue,)).fetchone()
    return int(count)


@pytest.mark.parametrize(
    ("count", "query"),
    [(1, ""), (50, ""), (1234, ""), (50, "?flush_ms=60000"), (1234, "?flush_ms=60000")],
)
def test_buffered_adds_are_written_at_a_normal_exit_without_close(
    tmp_path: Path, count: int, query: str
) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}{query}"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, url, str(count)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("added"), done.stdout
    assert (_stored(path, "bull:exit"), _stored(path, "bull:exit-done")) == (count, 1)
