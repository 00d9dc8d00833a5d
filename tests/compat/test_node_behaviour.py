"""psyq.compat.bullmq where a program ported from Node BullMQ 6 meets the layer: what Node
does is what these tests ask for, except where the `bullmq` Python package's own suite asks
otherwise (the layer follows the package there, and docs/porting.md says so)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

from psyq.compat.bullmq import Job, Queue, Worker
from psyq.sandbox import Sandbox
from tests.conformance.conftest import Recorder
from tests.polling import eventually


async def _settled(queue: Queue, job_id: str, state: str = "completed") -> None:
    async def reached() -> bool:
        return await queue.getJobState(job_id) == state

    await eventually(reached, timeout=20)


# ---------------------------------------------------------------------- concurrency
async def test_concurrency_raised_at_run_time_takes_effect(
    opts: dict[str, str], queue_name: str
) -> None:
    queue = Queue(queue_name, opts)
    running: set[str] = set()
    gate = asyncio.Event()

    async def process(job: Job, token: str) -> None:
        running.add(str(job.id))
        await gate.wait()

    worker = Worker(queue_name, process, {**opts, "concurrency": 1})
    try:
        for n in range(3):
            await queue.add("job", {"n": n})
        await eventually(lambda: len(running) == 1)
        worker.concurrency = 3
        assert worker.concurrency == 3
        await eventually(lambda: len(running) == 3)
        gate.set()
        assert await eventually(lambda: _count(queue, "completed", 3))
    finally:
        gate.set()
        await worker.close()
        await queue.close()


async def test_concurrency_lowered_at_run_time_takes_effect(
    opts: dict[str, str], queue_name: str
) -> None:
    queue = Queue(queue_name, opts)
    running: set[str] = set()
    most = 0

    async def process(job: Job, token: str) -> None:
        nonlocal most
        running.add(str(job.id))
        most = max(most, len(running))
        await asyncio.sleep(0.01)  # sleep: the job's work
        running.discard(str(job.id))

    worker = Worker(queue_name, process, {**opts, "concurrency": 4})
    try:
        await worker.waitUntilReady()
        worker.concurrency = 1
        for n in range(6):
            await queue.add("job", {"n": n})
        assert await eventually(lambda: _count(queue, "completed", 6))
        assert most == 1
    finally:
        await worker.close()
        await queue.close()


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
async def test_a_bad_concurrency_is_refused_naming_it(
    opts: dict[str, str], queue_name: str, value: Any
) -> None:
    worker = Worker(queue_name, None, opts)
    try:
        with pytest.raises(ValueError, match="concurrency") as raised:
            worker.concurrency = value
        assert repr(value) in str(raised.value)
        assert worker.concurrency == 1
    finally:
        await worker.close()


async def _count(queue: Queue, state: str, expected: int) -> bool:
    return (await queue.getJobCounts(state))[state] == expected


# ---------------------------------------------------------------------- manual processing
async def test_manual_loop_settles_every_fetched_job(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    added = [await queue.add("job", {"n": n}, {"removeOnComplete": False}) for n in range(3)]
    worker = Worker(queue_name, None, opts)
    token = "my-token"
    try:
        job = await worker.getNextJob(token)
        done = []
        while job is not None:
            done.append(job.id)
            nxt = await job.moveToCompleted(f"result of {job.data['n']}", token, True)
            if not nxt or not nxt[0]:
                break
            job = Job.fromJSON(worker, nxt[0], nxt[1])
            assert await job.isActive()
        assert done == [job.id for job in added]
        counts = await queue.getJobCounts("active", "completed", "waiting")
        assert counts == {"active": 0, "completed": 3, "waiting": 0}
        assert added[2].id is not None
        stored = await queue.getJob(added[2].id)
        assert stored is not None and stored.returnvalue == "result of 2"
    finally:
        await worker.close(force=True)
        await queue.close()


async def test_a_job_from_json_can_fail(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    await queue.add("first", {})
    second = await queue.add("second", {}, {"attempts": 1})
    worker = Worker(queue_name, None, opts)
    token = "my-token"
    try:
        job = await worker.getNextJob(token)
        assert job is not None
        nxt = await job.moveToCompleted("done", token, True)
        assert nxt is not None and nxt[1] == second.id
        fetched = Job.fromJSON(worker, nxt[0], nxt[1])
        assert (fetched.name, fetched.attemptsMade) == ("second", 0)
        assert await fetched.moveToFailed(ValueError("no good"), token) is None
        assert await fetched.isFailed()
        assert second.id is not None
        stored = await queue.getJob(second.id)
        assert stored is not None
        assert (stored.failedReason, stored.attemptsMade) == ("no good", 1)
        assert (await queue.getJobCounts("active"))["active"] == 0
    finally:
        await worker.close(force=True)
        await queue.close()


async def test_move_to_completed_fetches_nothing_by_default(
    opts: dict[str, str], queue_name: str
) -> None:
    """The `bullmq` package's default (fetchNext=False); Node's is true (docs/porting.md)."""
    queue = Queue(queue_name, opts)
    await queue.add("first", {})
    await queue.add("second", {})
    worker = Worker(queue_name, None, opts)
    try:
        job = await worker.getNextJob("token")
        assert job is not None
        assert await job.moveToCompleted("done", "token") is None
        assert await queue.getJobCounts("active", "waiting") == {"active": 0, "waiting": 1}
    finally:
        await worker.close(force=True)
        await queue.close()


# ---------------------------------------------------------------------- sandboxed processors
PROCESSOR_FILE = """
def process(job):
    job.update_progress(40)
    return {"doubled": job.data["n"] * 2, "attempts": job.attempts_made}
"""


async def test_a_processor_file_runs_in_a_sandbox(
    opts: dict[str, str], queue_name: str, tmp_path: Path
) -> None:
    path = tmp_path / "processor.py"
    path.write_text(textwrap.dedent(PROCESSOR_FILE))
    queue = Queue(queue_name, opts)
    job = await queue.add("double", {"n": 21}, {"removeOnComplete": False})
    worker = Worker(queue_name, str(path), opts)
    events = Recorder(worker, "completed", "progress", "error")
    try:
        [(done, result)] = await events.wait("completed", timeout=20)
        assert (done.id, result) == (job.id, {"doubled": 42, "attempts": 0})
        assert events.events["progress"][0][1] == 40
        assert events.events["error"] == []
    finally:
        await worker.close()
        await queue.close()


async def test_a_sandbox_processor_works(
    opts: dict[str, str], queue_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "compat_sandbox_tasks.py").write_text(textwrap.dedent(PROCESSOR_FILE))
    monkeypatch.chdir(tmp_path)
    queue = Queue(queue_name, opts)
    job = await queue.add("double", {"n": 4}, {"removeOnComplete": False})
    async with Sandbox("compat_sandbox_tasks:process") as sandbox:
        worker = Worker(queue_name, sandbox, opts)
        events = Recorder(worker, "completed", "failed")
        try:
            [(done, result)] = await events.wait("completed", timeout=20)
            assert (done.id, result) == (job.id, {"doubled": 8, "attempts": 0})
            assert events.events["failed"] == []
        finally:
            await worker.close()
            await queue.close()


async def test_a_processor_file_that_cannot_run_is_refused(
    opts: dict[str, str], queue_name: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.py"
    with pytest.raises(ValueError, match=r"missing\.py"):
        Worker(queue_name, str(missing), opts)
    other = tmp_path / "other.py"
    other.write_text("def handle(job):\n    return 1\n")
    with pytest.raises(ValueError, match=r"other\.py.*process"):
        Worker(queue_name, str(other), opts)
    with pytest.raises(ValueError, match="not-a-processor"):
        Worker(queue_name, "not-a-processor", opts)


# ---------------------------------------------------------------------- queue events
async def test_queue_emits_waiting_on_add(opts: dict[str, str], queue_name: str) -> None:
    queue = Queue(queue_name, opts)
    seen: list[Any] = []
    queue.on("waiting", seen.append)
    try:
        job = await queue.add("job", {"n": 1})
        assert [(type(j), j.id, j.name) for j in seen] == [(Job, job.id, "job")]
    finally:
        await queue.close()


# ---------------------------------------------------------------------- job counts
async def test_job_counts_answer_under_the_names_asked(
    opts: dict[str, str], queue_name: str
) -> None:
    queue = Queue(queue_name, opts)
    try:
        await queue.add("a", {})
        await queue.add("b", {})
        counts = await queue.getJobCounts("wait", "waiting", "active")
        assert counts == {"wait": 2, "waiting": 2, "active": 0}
        await queue.pause()
        # Node 6: a paused queue's jobs stay in `wait`; `paused` is the old layout's list
        assert await queue.getJobCounts("wait", "paused") == {"wait": 2, "paused": 0}
        assert await queue.getWaitingCount() == 2
    finally:
        await queue.close()


async def test_job_counts_count_job_schedulers_under_repeat(
    opts: dict[str, str], queue_name: str
) -> None:
    queue = Queue(queue_name, opts)
    try:
        assert await queue.getJobCounts("repeat") == {"repeat": 0}
        await queue.upsertJobScheduler("every-minute", {"every": 60_000}, job_name="tick")
        await queue.upsertJobScheduler("hourly", {"pattern": "0 * * * *"}, job_name="tock")
        assert await queue.getJobCounts("repeat") == {"repeat": 2}
        assert await queue.removeJobScheduler("hourly") == 0  # the package's: 0 = removed
        assert await queue.removeJobScheduler("hourly") == 1  # 1 = there was none
        assert await queue.getJobCounts("repeat") == {"repeat": 1}
    finally:
        await queue.close()


# ---------------------------------------------------------------------- worker listeners
async def test_completed_and_failed_listeners_take_two_or_three_arguments(
    opts: dict[str, str], queue_name: str
) -> None:
    queue = Queue(queue_name, opts)
    await queue.add("ok", {})
    await queue.add("bad", {})

    async def process(job: Job, token: str) -> str:
        if job.name == "bad":
            raise ValueError("bad job")
        return "fine"

    worker = Worker(queue_name, process, {**opts, "autorun": False})
    seen: list[tuple[Any, ...]] = []
    worker.on("completed", lambda job, result: seen.append(("completed", result)))
    worker.on("completed", lambda job, result, prev: seen.append(("completed", result, prev)))
    worker.on("failed", lambda job, err: seen.append(("failed", str(err))))
    worker.on("failed", lambda job, err, prev: seen.append(("failed", str(err), prev)))
    worker.on("completed", lambda job: seen.append(("completed", job.name)))
    worker.once("failed", lambda job, err, prev: seen.append(("once", str(err), prev)))
    errors = Recorder(worker, "error")
    run = asyncio.ensure_future(worker.run())
    try:
        await eventually(lambda: len(seen) == 6)
        assert sorted(seen) == [
            ("completed", "fine"),
            ("completed", "fine", "active"),
            ("completed", "ok"),
            ("failed", "bad job"),
            ("failed", "bad job", "active"),
            ("once", "bad job", "active"),
        ]
        assert errors.events["error"] == []
    finally:
        await worker.close()
        await run
        await queue.close()


async def test_an_exception_in_a_listener_is_reported(
    opts: dict[str, str], queue_name: str
) -> None:
    queue = Queue(queue_name, opts)
    await queue.add("ok", {})
    worker = Worker(queue_name, lambda job, token: "fine", {**opts, "autorun": False})

    def broken(job: Job, result: Any, prev: str) -> None:
        raise RuntimeError(f"listener broke on {prev}")

    worker.on("completed", broken)
    errors = Recorder(worker, "error")
    run = asyncio.ensure_future(worker.run())
    try:
        [(error,)] = await errors.wait("error")
        assert isinstance(error, RuntimeError) and str(error) == "listener broke on active"
    finally:
        await worker.close()
        await run
        await queue.close()


# ---------------------------------------------------------------------- errors a porter reads
async def test_an_unknown_backoff_names_the_layers_option(
    opts: dict[str, str], queue_name: str
) -> None:
    queue = Queue(queue_name, opts)
    job = await queue.add("job", {}, {"attempts": 2, "backoff": {"type": "jitter-ish"}})

    async def process(job: Job, token: str) -> None:
        raise ValueError("try again")

    worker = Worker(queue_name, process, opts)
    try:
        await _settled(queue, str(job.id), "failed")  # not retried
        stored = await queue.getJob(str(job.id))
        assert stored is not None and stored.attemptsMade == 1
        reason = str(stored.failedReason)
        assert reason.startswith("try again") and "'jitter-ish'" in reason
        assert "settings={'backoffStrategy'" in reason, reason
        assert "register_backoff_strategy" not in reason and "backoff_strategies" not in reason
    finally:
        await worker.close()
        await queue.close()
