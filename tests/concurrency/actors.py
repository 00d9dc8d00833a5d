"""The processes of the concurrency layer: `python -m tests.concurrency.actors SPEC`, where
SPEC is a JSON object naming a `role` and its arguments. Each actor runs until its work is
done or the file `stop` names exists, then writes what it saw to the file `out` names (JSON):
what it ran, the `error` events it got, what its calls raised. Nothing here decides whether
a run passed; the tests read these files and count."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import psyq
from tests.polling import eventually

Spec = dict[str, Any]
STOP_WAIT_S = 3600.0  # an actor waits to be told to stop; the scenario's timeout ends first
ROLES: dict[str, Callable[[Spec], Coroutine[Any, Any, dict[str, Any]]]] = {}


def role(
    fn: Callable[[Spec], Coroutine[Any, Any, dict[str, Any]]],
) -> Callable[[Spec], Coroutine[Any, Any, dict[str, Any]]]:
    ROLES[fn.__name__] = fn
    return fn


def described(exc: BaseException) -> list[str]:
    return [type(exc).__name__, str(exc)]


async def attempt(call: Awaitable[Any], raised: list[list[str]]) -> bool:
    """Await `call`; a psyq error is recorded in `raised`, not raised."""
    try:
        await call
    except psyq.PsyqError as exc:
        raised.append(described(exc))
        return False
    return True


async def wait_stop(spec: Spec) -> None:
    stop = Path(spec["stop"])
    await eventually(stop.exists, "the stop file", STOP_WAIT_S, interval=0.05)


def until(spec: Spec) -> float:
    """The monotonic deadline of an actor that runs for `seconds`."""
    return time.monotonic() + float(spec["seconds"])


@role
async def worker(spec: Spec) -> dict[str, Any]:
    """A Worker per queue of `queues`; each job sleeps `data.ms` (default `ms`) and returns
    1; runs, failures and error events are recorded per queue and job id."""
    runs: list[list[str]] = []
    spans: list[list[Any]] = []  # grouped jobs: [group id, start ms, end ms] (wall clock)
    failed: list[list[str]] = []
    errors: list[list[str]] = []
    options = spec.get("options", {})

    def processor(queue: str) -> Callable[[psyq.Job], Awaitable[int]]:
        async def run(job: psyq.Job) -> int:
            runs.append([queue, job.id])
            started = time.time() * 1000
            await asyncio.sleep(job.data.get("ms", spec.get("ms", 0)) / 1000)  # sleep: the work
            if "group" in job.opts:
                spans.append([job.opts["group"]["id"], started, time.time() * 1000])
            return 1

        return run

    workers = []
    for queue in spec["queues"]:
        one = psyq.Worker(queue, processor(queue), connection=spec["url"], **options)
        one.on("error", lambda exc: errors.append(described(exc)))
        one.on("failed", lambda job, exc, q=queue: failed.append([q, job.id, str(exc)]))
        workers.append(one)
    await wait_stop(spec)
    statistics: Counter[str] = Counter()
    for one in workers:
        await one.close()
        statistics.update(one.statistics())
    return {
        "runs": runs,
        "spans": spans,
        "failed": failed,
        "errors": errors,
        "statistics": dict(statistics),
    }


@role
async def flows(spec: Spec) -> dict[str, Any]:
    """`count` flows, one every `interval` ms, each a parent of `parent_ms` in
    `parent_queue` with one child of its own (`c<tag>-<i>`) in `child_queue`. Flows share
    parents: generation g (flows 2·parents·g ..) names parents `p<g>-0` .. `p<g>-<parents-1>`
    twice, first with children of `child_ms[0]` (the parents soon run), then, while they
    run, with children of `child_ms[1]`, which outlast them."""
    raised: list[list[str]] = []
    added = 0
    parents = spec["parents"]
    async with psyq.FlowProducer(connection=spec["url"]) as producer:
        for i in range(spec["count"]):
            data = {"ms": spec["child_ms"][(i // parents) % 2]}
            child = {"name": "child", "queue_name": spec["child_queue"], "data": data}
            tree = {
                "name": "parent",
                "queue_name": spec["parent_queue"],
                "data": {"ms": spec["parent_ms"]},
                "opts": {"jobId": f"p{i // (2 * parents)}-{i % parents}"},
                "children": [{**child, "opts": {"jobId": f"c{spec['tag']}-{i}"}}],
            }
            added += await attempt(producer.add(tree), raised)
            await asyncio.sleep(spec["interval"] / 1000)  # sleep: the pause between two adds
    return {"added": added, "raised": raised}


@role
async def upserter(spec: Spec) -> dict[str, Any]:
    """Upsert the same scheduler (`every` ms) every `interval` ms for `seconds`."""
    raised: list[list[str]] = []
    calls = 0
    deadline = until(spec)
    async with psyq.Queue(spec["queue"], connection=spec["url"]) as queue:
        while time.monotonic() < deadline:
            upsert = queue.upsert_job_scheduler("tick", {"every": spec["every"]}, {"name": "tick"})
            calls += await attempt(upsert, raised)
            await asyncio.sleep(spec["interval"] / 1000)  # sleep: the pause between two calls
    return {"calls": calls, "raised": raised}


@role
async def producer(spec: Spec) -> dict[str, Any]:
    """Add jobs `j<first>` .. in bulks of `bulk`, `count` in all (ids make adds idempotent:
    a failed bulk is sent again)."""
    raised: list[list[str]] = []
    async with psyq.Queue(spec["queue"], connection=spec["url"]) as queue:
        first, last = spec["first"], spec["first"] + spec["count"]
        while first < last:
            bulk = [
                {"name": "j", "data": {"ms": spec["ms"]}, "opts": {"jobId": f"j{n}"}}
                for n in range(first, min(last, first + spec["bulk"]))
            ]
            if await attempt(queue.add_bulk(bulk), raised):
                first += len(bulk)
    return {"raised": raised}


ADMIN_CALLS: list[Callable[[psyq.Queue], Awaitable[Any]]] = [
    lambda q: q.get_job_counts(),
    lambda q: q.get_jobs(["waiting", "active", "completed"], 0, 50),
    lambda q: q.get_workers(),
    lambda q: q.pause(),
    lambda q: q.resume(),
    lambda q: q.get_metrics("completed"),
    lambda q: q.clean(0, 100, "completed"),
    lambda q: q.count(),
    lambda q: q.is_paused(),
]


@role
async def admin(spec: Spec) -> dict[str, Any]:
    """Call the admin methods of ADMIN_CALLS in turn until stopped (a pause is always
    followed by a resume), every `interval` ms."""
    raised: list[list[str]] = []
    calls = 0
    stop = Path(spec["stop"])
    async with psyq.Queue(spec["queue"], connection=spec["url"]) as queue:
        while not stop.exists():
            await attempt(ADMIN_CALLS[calls % len(ADMIN_CALLS)](queue), raised)
            calls += 1
            await asyncio.sleep(spec["interval"] / 1000)  # sleep: the pause between two calls
        await queue.resume()
    return {"calls": calls, "raised": raised}


@role
async def burner(spec: Spec) -> dict[str, Any]:
    """Keep a CPU busy until stopped: the loaded machine of the lock-renewal scenario."""
    stop = Path(spec["stop"])
    spins = 0
    while not stop.exists():
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            spins += 1
        await asyncio.sleep(0)
    return {"spins": spins}


def main() -> None:
    spec: Spec = json.loads(sys.argv[1])
    result = asyncio.run(ROLES[spec["role"]](spec))
    Path(spec["out"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
