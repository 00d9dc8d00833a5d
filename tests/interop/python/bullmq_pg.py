"""bullmq for Python (PyPI `bullmq[postgres]`) on BullMQ 6's Postgres layout, run from its
own virtualenv by tests/interop/test_bullmq_postgres.py (never imported by psyq's tests):

    python bullmq_pg.py add <queue> <postgres url> <schema> '<[{name, data, opts}]>'
    python bullmq_pg.py work <queue> <postgres url> <schema> <count>
    python bullmq_pg.py inspect <queue> <postgres url> <schema> '<[ids]>'

`work` processes until <count> jobs finished (completed, or failed for good): progress 50,
then data.fail raises, else it returns {doubled: data.n * 2, name}. Each prints one JSON
line."""

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from bullmq import Queue, Worker


def options(url: str, schema: str) -> dict[str, Any]:
    return {"backend": "postgres", "connection": url, "schema": schema}


async def add(name: str, url: str, schema: str, jobs_json: str) -> list[str]:
    queue = Queue(name, options(url, schema))
    ids: list[str] = []
    for spec in json.loads(jobs_json):
        job = await queue.add(spec["name"], spec.get("data", {}), spec.get("opts", {}))
        ids.append(job.id)
    await queue.close()
    return ids


async def work(name: str, url: str, schema: str, count: str) -> dict[str, Any]:
    outcomes: dict[str, Any] = {}
    done = asyncio.Event()

    async def process(job: Any, token: str) -> dict[str, Any]:
        await job.updateProgress(50)
        if job.data.get("fail"):
            raise ValueError("bullmq-py says no")
        return {"doubled": job.data["n"] * 2, "name": job.name}

    def finished(job_id: str, outcome: dict[str, Any]) -> None:
        outcomes[job_id] = outcome
        if len(outcomes) >= int(count):
            done.set()

    def on_failed(job: Any, error: BaseException, *args: Any) -> None:
        if job.attemptsMade >= job.opts.get("attempts", 1):
            finished(job.id, {"state": "failed", "reason": str(error)})

    worker = Worker(name, process, options(url, schema))
    worker.on(
        "completed",
        lambda job, value, *args: finished(job.id, {"state": "completed", "value": value}),
    )
    worker.on("failed", on_failed)
    await asyncio.wait_for(done.wait(), 30)
    await worker.close()
    return outcomes


async def inspect(name: str, url: str, schema: str, ids_json: str) -> dict[str, Any]:
    queue = Queue(name, options(url, schema))
    seen: dict[str, Any] = {}
    for job_id in json.loads(ids_json):
        job = await queue.getJob(job_id)
        seen[job_id] = (
            None
            if job is None
            else {
                "state": await job.getState(),
                "returnvalue": job.returnvalue,
                "attemptsMade": job.attemptsMade,
                "failedReason": job.failedReason,
                "progress": job.progress,
            }
        )
    await queue.close()
    return seen


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    commands: dict[str, Callable[..., Awaitable[Any]]] = {
        "add": add,
        "work": work,
        "inspect": inspect,
    }

    async def main() -> Any:
        return await commands[command](*args)

    print(json.dumps(asyncio.run(main())))
