"""A crash of the application around its transaction (docs/transactions.md): an app process
that commits an order row and its job in one transaction is killed with `kill -9` inside
a transaction (the job added, the commit not sent) or right after a commit. Every order
committed has its job and every job its order (both or neither), nothing acknowledged is
lost, and a worker started afterwards runs each job once. Without `transaction=` the
first case leaves a job whose order never was."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest

import psyq
from tests.conftest import fresh_name
from tests.polling import Deadline, eventually

from .conftest import url_for

ROOT = Path(__file__).resolve().parents[2]


def start_app(server: str, url: str, queue: str, table: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "tests.postgres.tx_app", server, url, queue, table]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def killed_at(app: subprocess.Popen[str], word: str, n: int) -> set[int]:
    """Kill the app with SIGKILL as soon as it says `word n` (`added`: inside the
    transaction, the job added, before the commit; `committed`: right after the commit);
    every commit it acknowledged."""
    assert app.stdout is not None
    committed: set[int] = set()
    deadline = Deadline(f"the app saying {word} {n}", 60)
    for line in app.stdout:
        said, number = line.split() if " " in line else (line.strip(), "-1")
        if said == "committed":
            committed.add(int(number))
        if (said, int(number)) == (word, n):
            app.send_signal(signal.SIGKILL)
            break
        if deadline.passed():
            deadline.fail(f"{len(committed)} committed")
    app.wait(10)
    app.stdout.close()
    assert app.returncode == -signal.SIGKILL, f"the app ended by itself ({app.returncode})"
    return committed


@pytest.mark.parametrize("moment", ["added", "committed"])
async def test_a_killed_app_leaves_each_order_with_its_job_and_no_job_alone(
    pg_server: str, fresh_schema: Callable[[], str], moment: str
) -> None:
    url, queue_name = url_for(pg_server, fresh_schema()), fresh_name()
    table = f"orders_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_server)
    try:
        await admin.execute(f"CREATE TABLE {table} (n integer PRIMARY KEY)")
        async with psyq.Queue(queue_name, connection=url) as queue:
            last = random.randint(5, 40)
            app = start_app(pg_server, url, queue_name, table)
            acknowledged = killed_at(app, moment, last)
            orders = {row["n"] for row in await admin.fetch(f"SELECT n FROM {table}")}
            jobs = [job.data["n"] for job in await queue.get_jobs(["waiting"], 0, -1)]
        assert acknowledged <= orders, f"lost: {sorted(acknowledged - orders)}"
        assert sorted(jobs) == sorted(orders)  # both or neither; no job twice
        assert (last in orders) == (moment == "committed")  # the kill's own transaction
        await _run_each_once(url, queue_name, orders)
    finally:
        await admin.execute(f"DROP TABLE IF EXISTS {table}")
        await admin.close()


async def _run_each_once(url: str, queue_name: str, orders: set[int]) -> None:
    """A worker started after the crash runs each order's job once."""
    runs: Counter[int] = Counter()

    async def send(job: psyq.Job) -> None:
        runs[job.data["n"]] += 1

    worker = psyq.Worker(queue_name, send, connection=url, concurrency=10)
    try:
        await eventually(lambda: sum(runs.values()) >= len(orders), f"{len(orders)} runs", 30)
    finally:
        await worker.close()
    assert set(runs) == orders and set(runs.values()) == {1}
