"""Real processes on one `psyq server`: several worker processes share a queue (every job
runs exactly once), and a kill -9 of a durable server under write load loses no acknowledged
job while workers reconnect and finish the run. Outcomes are counted like Jepsen's queue
checker: invoked / ok / unknown per job, then lost and duplicated."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psyq
from tests.polling import eventually
from tests.server.server_proc import ROOT, start_server


def start_workers(count: int, url: str, queue: str, logs: Path) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PSYQ_TEST_LOG_DIR": str(logs)}
    command = [sys.executable, "-m", "psyq", "worker", "tests.server.procs:record"]
    command += ["--queue", queue, "--connection", url, "--concurrency", "20"]
    return [
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(count)
    ]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def runs_per_job(logs: Path) -> Counter[str]:
    runs: Counter[str] = Counter()
    for log in logs.glob("*.log"):
        runs.update(log.read_text().split())
    return runs


async def test_four_worker_processes_run_every_job_exactly_once(
    tmp_path: Path, queue_name: str
) -> None:
    server = start_server(tmp_path / "server.log", "--data", str(tmp_path / "jobs.db"))
    logs = tmp_path / "runs"
    logs.mkdir()
    workers = start_workers(4, server.url, queue_name, logs)
    total = 4000
    try:
        async with psyq.Queue(queue_name, connection=server.url) as queue:
            for start in range(0, total, 500):
                await queue.add_bulk(
                    [{"name": "x", "data": {"i": i}} for i in range(start, start + 500)]
                )

            async def all_completed() -> bool:
                return (await queue.get_job_counts("completed"))["completed"] == total

            await eventually(all_completed, f"{total} jobs completed", 45)
    finally:
        stop_workers(workers)
        server.stop()
    runs = runs_per_job(logs)
    lost = total - len(runs)
    duplicates = sum(count - 1 for count in runs.values())
    print(f"processes={len(list(logs.glob('*.log')))} ran={len(runs)} lost={lost} dup={duplicates}")
    assert (lost, duplicates) == (0, 0)
    assert len(list(logs.glob("*.log"))) >= 2  # the work was shared


class Producer:
    """Adds jobs job-0 .. job-N-1 from several tasks; a failed add is retried with the same
    id (adds are idempotent by id), so every job is acknowledged in the end."""

    def __init__(self, queue: psyq.Queue, total: int) -> None:
        self.queue = queue
        self.todo = [f"job-{i}" for i in range(total)]
        self.acked: set[str] = set()
        self.unknown: set[str] = set()  # an add that raised: it may or may not have landed

    async def run(self, tasks: int) -> None:
        await asyncio.gather(*(self._loop() for _ in range(tasks)))

    async def _loop(self) -> None:
        while self.todo:
            job_id = self.todo.pop()
            try:
                await self.queue.add("x", {"id": job_id}, job_id=job_id)
            except psyq.PsyqError:
                self.unknown.add(job_id)
                self.todo.insert(0, job_id)
            else:
                self.acked.add(job_id)


async def test_kill9_of_a_durable_server_loses_no_acknowledged_job(
    tmp_path: Path, queue_name: str
) -> None:
    data = ["--data", str(tmp_path / "jobs.db"), "--durability", "durable"]
    log = tmp_path / "server.log"
    server = start_server(log, *data)
    url = server.url + "?connect_timeout=20"
    total = 1500
    runs: Counter[str] = Counter()
    errors: list[Any] = []

    async def record(job: psyq.Job) -> None:
        runs[job.id] += 1

    queue = psyq.Queue(queue_name, connection=url)
    producer = Producer(queue, total)
    options: dict[str, Any] = dict(concurrency=10, stalled_interval=500, max_stalled_count=50)
    workers = [psyq.Worker(queue_name, record, connection=url, **options) for _ in range(2)]
    for worker in workers:
        worker.on("error", errors.append)
    try:
        adding = asyncio.ensure_future(producer.run(tasks=8))
        await eventually(lambda: len(producer.acked) >= total // 3, "a third added", 30)
        acked_before_kill = set(producer.acked)
        server.kill9()
        server = start_server(log, *data, port=server.port)
        await adding

        async def all_completed() -> bool:
            return (await queue.get_job_counts("completed"))["completed"] == total

        await eventually(all_completed, f"{total} jobs completed after the restart", 40)
        states = {job_id: await queue.get_job_state(job_id) for job_id in producer.acked}
    finally:
        for worker in workers:
            await worker.close(force=True)
        await queue.close()
        server.stop()
    lost = sorted(job_id for job_id, state in states.items() if state != "completed")
    duplicates = sum(count - 1 for count in runs.values())
    print(
        f"invoked={total} ok={len(producer.acked)} (before the kill: {len(acked_before_kill)}) "
        f"unknown={len(producer.unknown)} lost={len(lost)} duplicated={duplicates} "
        f"worker errors={len(errors)}"
    )
    assert lost == []
    assert len(producer.acked) == total
