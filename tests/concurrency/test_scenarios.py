"""Issue 41's adversarial scenarios as tests: real processes on Redis, Postgres and a psyq
server, counting per job how often it ran, per parent how often it ran, the `error` events
of every worker, what producers' and admins' calls raised (deadlocks among them on
Postgres). Each prints one line of figures (`pytest -s`; `make soak` for the long run)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

import psyq
from tests.conftest import fresh_name
from tests.polling import eventually

from .conftest import SCALE, Actors, scaled

pytestmark = pytest.mark.timeout(120 + 300 * SCALE)


async def drained(url: str, *queues: str) -> bool:
    """No job left to run in any of `queues`."""
    for name in queues:
        async with psyq.Queue(name, connection=url) as queue:
            left = await queue.get_job_counts(
                "waiting", "active", "delayed", "prioritized", "paused", "waiting-children"
            )
        if any(left.values()):
            return False
    return True


def merged(results: list[dict[str, Any]], key: str) -> list[Any]:
    return [item for result in results for item in result[key]]


def counted(what: str, runs: Counter[Any]) -> dict[str, int]:
    """Figures of `runs` (id -> times run): how many ran, how many more than once."""
    return {f"{what}_run": len(runs), f"{what}_run_twice": sum(n > 1 for n in runs.values())}


def deadlocks(raised: list[list[str]]) -> int:
    return sum("deadlock" in message for _, message in raised)


def figures(scenario: str, url: str, **counts: Any) -> None:
    text = " ".join(f"{name}={value}" for name, value in counts.items())
    print(f"\n[{scenario} {url.split(':', 1)[0]} scale={SCALE:g}] {text}")


async def test_flows_sharing_parents_run_each_parent_once(actors: Actors) -> None:
    """Two producers add the same flows at once (parents named by several flows of both),
    naming each parent again while it runs, with a child that outlasts it; two worker
    processes run both queues. Every child runs once, every parent once (one given a
    child while it ran fails with the refusal, as in BullMQ: issue 41, defect 1), and
    nothing is reported as an error."""
    parents, per_producer = 10, scaled(40)
    parent_queue, child_queue = fresh_name("parents"), fresh_name("children")
    for tag in ("a", "b"):
        actors.start(
            "flows",
            tag=tag,
            count=per_producer,
            parents=parents,
            parent_ms=800,
            child_ms=[10, 1000],
            interval=50,
            parent_queue=parent_queue,
            child_queue=child_queue,
        )
    for _ in range(2):
        actors.start("worker", queues=[parent_queue, child_queue], options={"concurrency": 10})
    produced = actors.results("flows", timeout=60 * SCALE)
    await eventually(
        lambda: drained(actors.url, parent_queue, child_queue), "flows done", 60 * SCALE
    )
    actors.stop()
    ran = actors.results("worker")
    runs = Counter((queue, job_id) for queue, job_id in merged(ran, "runs"))
    parent_runs = Counter({job_id: n for (q, job_id), n in runs.items() if q == parent_queue})
    child_runs = Counter({job_id: n for (q, job_id), n in runs.items() if q == child_queue})
    failed = merged(ran, "failed")
    raised, errors = merged(produced, "raised"), merged(ran, "errors")
    figures(
        "flows",
        actors.url,
        flows=2 * per_producer,
        **counted("parents", parent_runs),
        parents_failed_with_a_child_pending=len(failed),
        **counted("children", child_runs),
        error_events=len(errors),
        add_errors=len(raised),
        deadlocks=deadlocks(raised),
    )
    assert raised == []
    assert errors == []
    generations = -(-per_producer // (2 * parents))
    assert set(parent_runs) == {f"p{g}-{k}" for g in range(generations) for k in range(parents)}
    assert set(parent_runs.values()) == {1}
    assert set(child_runs) == {f"c{tag}-{i}" for tag in "ab" for i in range(per_producer)}
    assert set(child_runs.values()) == {1}
    assert all(q == parent_queue and "children" in reason for q, _, reason in failed), failed


async def test_scheduler_upserts_from_several_processes_add_no_runs(actors: Actors) -> None:
    """Three processes upsert one `every` scheduler again and again while two worker
    processes run it: runs stay one per slot, `every` apart (issue 41, defect 2)."""
    every, seconds = 300, 3 * SCALE
    queue = fresh_name("tick")
    for _ in range(3):
        actors.start("upserter", queue=queue, every=every, interval=50, seconds=seconds)
    for _ in range(2):
        actors.start("worker", queues=[queue])
    upserts = actors.results("upserter", timeout=60 + seconds)
    actors.stop()
    ran = actors.results("worker")
    ids = Counter(job_id for _, job_id in merged(ran, "runs"))
    slots = sorted(int(job_id.rsplit(":", 1)[1]) for job_id in ids)
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    raised, errors = merged(upserts, "raised"), merged(ran, "errors")
    figures(
        "schedulers",
        actors.url,
        upserts=sum(result["calls"] for result in upserts),
        seconds=seconds,
        every_ms=every,
        runs=sum(ids.values()),
        slots_run_twice=counted("slots", ids)["slots_run_twice"],
        smallest_gap_ms=min(gaps, default=None),
        error_events=len(errors),
        upsert_errors=len(raised),
    )
    assert raised == [] and errors == []
    assert set(ids.values()) == {1}
    assert min(gaps) >= every  # so at most one run per `every` of the time it ran


async def test_admin_calls_under_load_lose_and_repeat_no_job(actors: Actors) -> None:
    """Producers add jobs while workers run them and an admin process pauses, resumes,
    cleans and reads the queue: every job runs once, no call fails."""
    per_producer = scaled(300)
    queue = fresh_name("admin")
    for first in (0, per_producer):
        actors.start("producer", queue=queue, first=first, count=per_producer, bulk=50, ms=5)
    for _ in range(2):
        actors.start("worker", queues=[queue], options={"concurrency": 10})
    actors.start("admin", queue=queue, interval=20)
    produced = actors.results("producer")
    await eventually(lambda: drained(actors.url, queue), "jobs done", 60 * SCALE)
    actors.stop()
    ran, admin = actors.results("worker"), actors.results("admin")
    runs = Counter(job_id for _, job_id in merged(ran, "runs"))
    raised = merged(produced, "raised") + merged(admin, "raised")
    errors = merged(ran, "errors")
    figures(
        "admin",
        actors.url,
        jobs=2 * per_producer,
        **counted("jobs", runs),
        admin_calls=sum(result["calls"] for result in admin),
        error_events=len(errors),
        call_errors=len(raised),
        deadlocks=deadlocks(raised),
    )
    assert raised == [] and errors == []
    assert set(runs) == {f"j{n}" for n in range(2 * per_producer)}
    assert set(runs.values()) == {1}


def most_at_once(spans: list[list[Any]]) -> int:
    """The most spans [start, end] open at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in edges:  # an end sorts before a start at the same moment
        running += step
        peak = max(peak, running)
    return peak


async def test_group_limits_hold_across_worker_processes(actors: Actors) -> None:
    """Two worker processes (4 slots each; either may take every job: three groups of
    concurrency 1 fit in one's slots) serve three groups with a group concurrency of 1
    and at most 3 starts per group per 400 ms: no group ever runs two jobs at once, every
    job runs once, and each group's starts (the store's take times) are spread as one limit
    across both processes spreads them: 8 jobs need 3 windows, so at least 800 ms from the
    first to the last (a limit per process would let both start 3 in each window: 400 ms).
    The limit's windows are fixed (one opens at the first start after the last ended), so
    any 400 ms holds at most 2 x 3 starts: that bound is checked too."""
    queue, per_group = fresh_name("groups"), scaled(8)
    async with psyq.Queue(queue, connection=actors.url) as q:
        jobs = await q.add_bulk(
            [
                {"name": f"{g}{i}", "data": {"ms": 20}, "opts": {"group": {"id": g}}}
                for i in range(per_group)
                for g in "abc"
            ]
        )
    group = {"concurrency": 1, "limit": {"max": 3, "duration": 400}}
    for _ in range(2):
        actors.start("worker", queues=[queue], options={"concurrency": 4, "group": group})
    await eventually(lambda: drained(actors.url, queue), "jobs done", 60 * SCALE)
    actors.stop()
    ran = actors.results("worker")
    runs = Counter(job_id for _, job_id in merged(ran, "runs"))
    spans = merged(ran, "spans")
    async with psyq.Queue(queue, connection=actors.url) as q:
        done = await q.get_completed()
    starts = {g: sorted(j.processed_on or 0 for j in done if j.name[0] == g) for g in "abc"}
    in_window = max(
        sum(1 for t in stamps if s <= t < s + 400) for stamps in starts.values() for s in stamps
    )
    reach = {g: stamps[-1] - stamps[0] for g, stamps in starts.items()}
    windows = -(-per_group // 3)  # ceil: the windows 3 starts each need
    peaks = {g: most_at_once([span[1:] for span in spans if span[0] == g]) for g in "abc"}
    figures("groups", actors.url, jobs=len(jobs), peaks=peaks, reach=reach, in_400ms=in_window)
    assert merged(ran, "errors") == []
    assert set(runs) == {job.id for job in jobs} and set(runs.values()) == {1}
    assert peaks == {"a": 1, "b": 1, "c": 1}
    assert in_window <= 2 * 3
    assert all(ms >= (windows - 1) * 400 for ms in reach.values()), reach


async def test_lock_renewal_on_a_loaded_machine_reports_no_error(actors: Actors) -> None:
    """A worker at concurrency 50 runs jobs of 200 ms with 600 ms locks (renewed every 300 ms)
    while a process keeps a CPU busy: renewals cross completions; none is an error
    (issue 41, defect 3), and no job runs twice."""
    jobs = scaled(500)
    queue = fresh_name("locks")
    actors.start("burner")
    actors.start("producer", queue=queue, first=0, count=jobs, bulk=100, ms=200)
    options = {"concurrency": 50, "lock_duration": 600}
    actors.start("worker", queues=[queue], options=options)
    actors.results("producer")
    await eventually(lambda: drained(actors.url, queue), "jobs done", 60 * SCALE)
    actors.stop()
    [ran] = actors.results("worker")
    actors.results("burner")
    runs = Counter(job_id for _, job_id in ran["runs"])
    figures(
        "locks",
        actors.url,
        jobs=jobs,
        **counted("jobs", runs),
        error_events=len(ran["errors"]),
        renewals_after_settle=ran["statistics"].get("renewals_after_settle", 0),
        settle_retries=ran["statistics"].get("settle_retries", 0),
    )
    assert ran["errors"] == []
    assert set(runs) == {f"j{n}" for n in range(jobs)}
    assert set(runs.values()) == {1}
