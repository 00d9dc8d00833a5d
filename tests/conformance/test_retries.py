"""Retries: attempts with fixed / exponential / custom backoff, unrecoverable errors."""

from __future__ import annotations

import uuid
from typing import Any

import psyq

from .conftest import Recorder, WorkerFactory, wait_state


def failing(times: int | None = None) -> Any:
    """A processor that fails its first `times` calls (all when None), then returns "ok"."""
    calls = 0

    async def process(job: psyq.Job) -> str:
        nonlocal calls
        calls += 1
        if times is None or calls <= times:
            raise RuntimeError(f"fail {calls}")
        return "ok"

    return process


async def test_fixed_backoff_retries_until_attempts_exhausted(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=3, backoff={"type": "fixed", "delay": 10})
    worker = make_worker(failing())
    rec = Recorder(worker, "failed")
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert final.attempts_made == 3
    assert final.failed_reason == "fail 3"
    await rec.wait("failed", 3)  # the worker emits after its settle returns: may lag the store
    assert len(rec.events["failed"]) == 3


async def test_exponential_backoff_retries_until_attempts_exhausted(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=3, backoff={"type": "exponential", "delay": 10})
    make_worker(failing())
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert final.attempts_made == 3
    assert final.failed_reason == "fail 3"


async def test_integer_backoff_is_a_fixed_delay(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=2, backoff=10)
    make_worker(failing(1))
    await wait_state(queue, job.id, "completed")


async def test_retry_succeeds_after_failures(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    job = await queue.add("a", None, attempts=3)
    make_worker(failing(2))
    await wait_state(queue, job.id, "completed")
    done = await queue.get_job(job.id)
    assert done is not None
    assert done.returnvalue == "ok"
    assert done.attempts_made == 3


async def test_no_attempts_option_fails_at_once(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a")
    make_worker(failing())
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert final.attempts_made == 1


async def test_backoff_delay_makes_the_retry_delayed(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=2, backoff={"type": "fixed", "delay": 60_000})
    worker = make_worker(failing())
    await Recorder(worker, "failed").wait("failed")
    await wait_state(queue, job.id, "delayed")
    between = await queue.get_job(job.id)
    assert between is not None
    assert between.attempts_made == 1
    assert between.failed_reason == "fail 1"
    await between.promote()
    await wait_state(queue, job.id, "failed")


async def test_retry_without_backoff_goes_back_to_waiting(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=2)
    worker = make_worker(None)
    taken = await worker.get_next_job("tok", block=False)
    assert taken is not None
    await taken.move_to_failed(RuntimeError("first"), "tok")
    assert await job.get_state() == "waiting"
    again = await worker.get_next_job("tok2", block=False)
    assert again is not None
    assert again.id == job.id
    assert again.attempts_made == 1


async def test_custom_backoff_strategy_from_worker(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    calls: list[tuple[int, str, str]] = []

    def strategy(attempts_made: int, kind: str, error: BaseException | None, job: Any) -> int:
        calls.append((attempts_made, kind, str(error)))
        return 5

    job = await queue.add("a", None, attempts=3, backoff={"type": "mine", "delay": 1})
    make_worker(failing(), backoff_strategies={"mine": strategy})
    await wait_state(queue, job.id, "failed")
    assert calls == [(1, "mine", "fail 1"), (2, "mine", "fail 2")]


async def test_custom_backoff_strategy_registered_globally(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    name = f"strategy-{uuid.uuid4().hex}"
    calls: list[int] = []

    def strategy(attempts_made: int, kind: str, error: BaseException | None, job: Any) -> int:
        calls.append(attempts_made)
        return 0

    psyq.register_backoff_strategy(name, strategy)
    job = await queue.add("a", None, attempts=2, backoff={"type": name})
    make_worker(failing(1))
    await wait_state(queue, job.id, "completed")
    assert calls == [1]


async def test_custom_strategy_minus_one_means_no_retry(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=5, backoff={"type": "never"})
    make_worker(failing(), backoff_strategies={"never": lambda *args: -1})
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert final.attempts_made == 1


async def test_unrecoverable_error_fails_despite_attempts_left(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    async def process(job: psyq.Job) -> None:
        raise psyq.UnrecoverableError("give up")

    job = await queue.add("a", None, attempts=5, backoff={"type": "fixed", "delay": 10})
    worker = make_worker(process)
    rec = Recorder(worker, "failed")
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert final.attempts_made == 1
    assert final.failed_reason == "give up"
    assert len(await rec.wait("failed")) == 1  # the worker emits it once its settle returns


async def test_stacktrace_is_stored(queue: psyq.Queue, make_worker: WorkerFactory) -> None:
    async def process(job: psyq.Job) -> None:
        raise ValueError("traced")

    job = await queue.add("a")
    make_worker(process)
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert len(final.stacktrace) == 1
    assert "ValueError" in final.stacktrace[0]
    assert "traced" in final.stacktrace[0]


async def test_stacktraces_accumulate_per_attempt(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=3)
    make_worker(failing())
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert len(final.stacktrace) == 3
    assert "fail 3" in final.stacktrace[-1]


async def test_stack_trace_limit_bounds_the_stacktraces(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, attempts=3, stack_trace_limit=1)
    make_worker(failing())
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert len(final.stacktrace) == 1
    assert "fail 3" in final.stacktrace[0]


async def test_stack_trace_limit_zero_keeps_none(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    job = await queue.add("a", None, stackTraceLimit=0)
    make_worker(failing())
    await wait_state(queue, job.id, "failed")
    final = await queue.get_job(job.id)
    assert final is not None
    assert final.stacktrace == []


async def test_a_backoff_that_cannot_be_worked_out_fails_the_job_saying_why(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    """An unknown backoff strategy (or one that raises) must not take the worker's slot
    down: the job fails, its reason says why it was not retried, the next job runs."""
    bad = await queue.add("a", None, attempts=3, backoff={"type": "nowhere"})
    good = await queue.add("b", None)

    async def process(job: psyq.Job) -> str:
        if job.name == "a":
            raise ValueError("first try failed")
        return "ok"

    make_worker(process)
    await wait_state(queue, bad.id, "failed")
    await wait_state(queue, good.id, "completed")
    failed = await queue.get_job(bad.id)
    assert failed is not None and failed.failed_reason is not None
    assert failed.failed_reason.startswith("first try failed (not retried: unknown backoff")
