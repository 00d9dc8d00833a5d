"""The Worker's parts, each on its own: `Slots`, `Locks`, `Settling` and `Fetching` given
small fakes of what they see (the worker's options as `Configured`, its events and hooks as
`Reports`, the settling part as the fetcher's `Riders`) and a fake store that records what
it is asked. No Worker is made: what a part does is what these tests see."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from psyq.backends.base import BackendAdapter, Completed, FetchRequest, JobRecord, StalledResult
from psyq.core.fetching import Fetching
from psyq.core.job import Job, QueueRef
from psyq.core.locks import RENEW_LOCK, Locks
from psyq.core.settling import Settling
from psyq.core.slots import Slots
from psyq.core.takes import Take, Takes
from psyq.core.worker_options import WorkerOptions
from psyq.errors import ConnectionError, InvalidOptionsError, LockError
from tests.polling import eventually

DEADLINE = 5.0  # seconds a test waits for a condition before it fails


class Config:
    """A fake `Configured`: options that a test may change."""

    def __init__(self, **options: Any) -> None:
        self.options = WorkerOptions.create(**options)


class Reports:
    """A fake `Reports`: records the events and the hooks called."""

    def __init__(self, hooks: frozenset[str] = frozenset()) -> None:
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        self.notified: list[tuple[str, dict[str, Any]]] = []
        self._hooks = hooks

    def emit(self, event: str, *args: Any) -> bool:
        self.events.append((event, args))
        return True

    def has_hook(self, hook: str) -> bool:
        return hook in self._hooks

    async def notify(self, hook: str, **kwargs: Any) -> None:
        self.notified.append((hook, kwargs))

    def named(self, event: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.events if name == event]


class Riders:
    """A fake `Riders`: completions ride on `take` while it is set."""

    def __init__(self, take: Take | None = None) -> None:
        self.take = take

    def riding_take(self) -> Take | None:
        return self.take


class Store:
    """A fake store: answers each call from a script the test sets, recording the call."""

    batch_settles = False
    settle_linger_ms = 0

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.lost: list[str] = []  # extend_locks: the ids whose lock is lost
        self.cancelled: dict[str, str] = {}
        self.stalled = StalledResult()
        self.takes: list[list[JobRecord] | Exception] = []  # move_to_active, call by call
        self.finishes: list[list[JobRecord] | Exception] = []  # move_to_finished, likewise
        self.woken = asyncio.Event()  # set when the fetcher waits for a job

    async def extend_locks(self, queue: str, locks: dict[str, str], ms: int) -> list[str]:
        self.calls.append(("extend_locks", (queue, dict(locks), ms)))
        return [job_id for job_id in self.lost if job_id in locks]

    async def get_cancelled(self, queue: str, job_ids: list[str]) -> dict[str, str]:
        self.calls.append(("get_cancelled", (queue, list(job_ids))))
        return {job_id: why for job_id, why in self.cancelled.items() if job_id in job_ids}

    async def move_stalled_jobs_to_wait(self, queue: str, count: int, ms: int) -> StalledResult:
        self.calls.append(("move_stalled_jobs_to_wait", (queue, count, ms)))
        return self.stalled

    async def get_job(self, queue: str, job_id: str) -> JobRecord | None:
        return None

    async def move_to_active(self, queue: str, request: FetchRequest) -> list[JobRecord]:
        self.calls.append(("move_to_active", (queue, list(request.tokens))))
        return self._answer(self.takes)

    async def wait_for_job(self, queue: str, timeout_ms: int) -> None:
        self.calls.append(("wait_for_job", (queue, timeout_ms)))
        self.woken.set()
        await asyncio.sleep(3600)  # sleep: a wait no job ends; the test ends the fetcher first

    async def move_to_finished(
        self, queue: str, job_id: str, token: str, outcome: Any, fetch: FetchRequest | None
    ) -> list[JobRecord]:
        self.calls.append(("move_to_finished", (queue, job_id, token, fetch is not None)))
        return self._answer(self.finishes)

    def named(self, call: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == call]

    @staticmethod
    def _answer(script: list[list[JobRecord] | Exception]) -> list[JobRecord]:
        answer = script.pop(0) if script else []
        if isinstance(answer, Exception):
            raise answer
        return answer


def record(job_id: str, token: str | None = None) -> JobRecord:
    return JobRecord(job_id, "q", "j", "{}", {}, 0, lock_token=token or f"tok-{job_id}")


def ref_of(store: Store, name: str = "q") -> QueueRef:
    return QueueRef(name, cast(BackendAdapter, store))


async def idle_slots(slots: Slots, n: int) -> list[asyncio.Task[Job]]:
    """`n` slot tasks waiting for a job, as a worker's slots wait."""
    tasks = [asyncio.ensure_future(slots.next_job()) for _ in range(n)]
    slots.tasks.extend(tasks)
    await eventually(lambda: slots.available() == n, f"{n} slots waiting", DEADLINE)
    return tasks


# ---------------------------------------------------------------------------- Slots
async def test_slots_hand_jobs_to_idle_slots_within_concurrency() -> None:
    slots = Slots(concurrency=2)
    slots.open()
    waiting = await idle_slots(slots, 2)
    assert await slots.wait_for_idle() == 2
    ref = ref_of(Store())
    slots.hand_out([Job(ref, record("a")), Job(ref, record("b"))])
    got = await asyncio.gather(*waiting)
    assert sorted(job.id for job in got) == ["a", "b"]
    assert slots.available() == 0 and slots.busy() == 2
    slots.concurrency = 1  # lowered while both run: no completion takes its next job
    assert not slots.taking_next()


async def test_paused_or_closed_slots_take_no_next_job() -> None:
    slots = Slots(concurrency=1)
    assert not slots.taking_next()  # not open yet
    slots.open()
    assert slots.taking_next()
    slots.pause()
    assert not slots.taking_next() and slots.paused
    slots.resume()
    slots.close(force=True)
    assert not slots.taking_next() and slots.forced
    slots.close(force=False)
    assert slots.forced  # a forced close stays forced


async def test_a_slot_freed_by_a_done_job_ends_a_graceful_close() -> None:
    slots = Slots(concurrency=1)
    job = Job(ref_of(Store()), record("a"))
    slots.begin(job)
    closing = asyncio.ensure_future(slots.wait_closed())
    await asyncio.sleep(0)
    assert not closing.done()
    slots.done(job)
    await asyncio.wait_for(closing, DEADLINE)
    assert slots.active == {}


# ---------------------------------------------------------------------------- Locks
async def test_locks_renews_the_locks_of_the_slots_active_jobs() -> None:
    store, reports, slots = Store(), Reports(), Slots(concurrency=2)
    locks = Locks(Config(lock_duration=7_000), slots, reports)
    ref = ref_of(store)
    for job_id in ("a", "b"):
        slots.begin(Job(ref, record(job_id)))
    assert await locks.extend(ref) == []
    assert store.named("extend_locks") == [("q", {"a": "tok-a", "b": "tok-b"}, 7_000)]
    assert reports.events == []


async def test_locks_reports_a_lock_lost_while_the_processor_runs() -> None:
    store, reports, slots = Store(), Reports(), Slots(concurrency=2)
    locks = Locks(Config(), slots, reports)
    ref = ref_of(store)
    running, settling = Job(ref, record("running")), Job(ref, record("settling"))
    slots.begin(running)
    slots.begin(settling)
    slots.processing(running, None)  # its processor runs; `settling`'s has returned
    store.lost = ["running", "settling"]
    assert await locks.extend(ref) == ["running", "settling"]
    [(error,)] = reports.named("error")
    assert isinstance(error, LockError) and error.job_id == "running"
    assert error.operation == RENEW_LOCK
    assert locks.renewals_after_settle == 1  # crossed its own settle: counted, no error


async def test_locks_stops_the_marked_jobs_whose_processor_can_be_cancelled() -> None:
    store, slots = Store(), Slots(concurrency=2)
    locks = Locks(Config(), slots, Reports())
    ref = ref_of(store)
    on_loop, in_thread = Job(ref, record("loop")), Job(ref, record("thread"))
    task = asyncio.ensure_future(asyncio.sleep(3600))  # sleep: a processor still running
    for job, runner in ((on_loop, task), (in_thread, None)):
        slots.begin(job)
        slots.processing(job, runner)
    store.cancelled = {"loop": "stop", "thread": "stop too"}
    assert sorted(await locks.check_cancelled(ref)) == ["loop", "thread"]
    await eventually(task.cancelled, "the processor on the loop cancelled", DEADLINE)
    assert (on_loop._cancelled, in_thread._cancelled) == ("stop", "stop too")


async def test_locks_reports_the_stalled_jobs_the_check_moved() -> None:
    store, reports = Store(), Reports()
    locks = Locks(Config(max_stalled_count=3, stalled_interval=900), Slots(1), reports)
    store.stalled = StalledResult(stalled=["s"])
    assert await locks.check_stalled(ref_of(store)) == ["s"]
    assert store.named("move_stalled_jobs_to_wait") == [("q", 3, 900)]
    assert reports.named("stalled") == [("s", "active")]
    assert reports.notified == [("psyq_job_stalled", {"queue_name": "q", "job_id": "s"})]


# ---------------------------------------------------------------------------- Settling
def settling(store: Store, slots: Slots, **options: Any) -> tuple[Settling, Takes, Reports]:
    config, reports = Config(**options), Reports()
    takes = Takes(config, "w1")
    return Settling(config, slots, takes, reports), takes, reports


async def test_settling_retries_a_settle_the_store_could_not_take() -> None:
    store, slots = Store(), Slots(concurrency=1)
    slots.open()
    settler, takes, reports = settling(store, slots)
    store.finishes = [ConnectionError("memory://", "gone"), [record("next")]]
    ref = ref_of(store)
    job = Job(ref, record("a"))
    following = await settler.settle(ref, job, Completed("1"), None)
    assert settler.retries == 1
    assert [args[1] for args in store.named("move_to_finished")] == ["a", "a"]
    assert [args[0].id for args in reports.named("completed")] == ["a"]
    assert following is not None and following.id == "next"  # fetch-next on the retry
    assert not takes.drained and not takes.short


async def test_settling_gives_up_a_retry_once_the_close_is_forced() -> None:
    store, slots = Store(), Slots(concurrency=1)
    settler, _, reports = settling(store, slots)
    slots.close(force=True)
    store.finishes = [ConnectionError("memory://", "gone")]
    ref = ref_of(store)
    assert await settler.settle(ref, Job(ref, record("a")), Completed("1"), None) is None
    assert settler.retries == 0
    [(error,)] = reports.named("error")
    assert isinstance(error, ConnectionError)
    assert store.named("move_to_finished") == [("q", "a", "tok-a", False)]  # closing: no take


# ---------------------------------------------------------------------------- Fetching
def fetching(
    store: Store, slots: Slots, riders: Riders | None = None
) -> tuple[Fetching, Takes, Reports]:
    config, reports = Config(drain_delay=0.25), Reports()
    takes = Takes(config, "w1")
    return Fetching(config, slots, takes, riders or Riders(), reports), takes, reports


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_fetching_backs_off_from_a_failing_store_and_hands_takes_to_slots() -> None:
    store, slots = Store(), Slots(concurrency=2)
    slots.open()
    waiting = await idle_slots(slots, 2)
    store.takes = [ConnectionError("memory://", "gone"), [record("a"), record("b")]]
    fetcher, _, reports = fetching(store, slots)
    running = asyncio.ensure_future(fetcher.run(ref_of(store)))
    try:
        got = await asyncio.wait_for(asyncio.gather(*waiting), DEADLINE)
    finally:
        await stop(running)
    assert sorted(job.id for job in got) == ["a", "b"]
    [(error,)] = reports.named("error")
    assert isinstance(error, ConnectionError)
    tokens = [args[1] for args in store.named("move_to_active")]
    assert tokens == [["w1:1", "w1:2"], ["w1:3", "w1:4"]]  # fresh tokens for each take


async def test_fetching_waits_for_work_once_the_queue_ran_dry() -> None:
    store, slots = Store(), Slots(concurrency=1)
    slots.open()
    await idle_slots(slots, 1)
    fetcher, takes, reports = fetching(store, slots)
    takes.drained = False  # the last take found jobs
    running = asyncio.ensure_future(fetcher.run(ref_of(store)))
    try:
        await asyncio.wait_for(store.woken.wait(), DEADLINE)
    finally:
        await stop(running)
    assert reports.named("drained") == [()]
    assert store.named("wait_for_job") == [("q", 250)]  # the drain delay, in ms


async def test_the_fetchers_take_carries_the_completions_riding_on_it() -> None:
    store, slots = Store(), Slots(concurrency=1)
    ridden: list[list[str]] = []

    async def ride(request: FetchRequest) -> list[JobRecord]:
        ridden.append(list(request.tokens))
        return [record("a")]

    fetcher, takes, _ = fetching(store, slots, Riders(ride))
    jobs = await fetcher.fetch(ref_of(store), takes.request(1), own=True)
    assert [job.id for job in jobs] == ["a"]
    assert ridden == [["w1:1"]] and store.named("move_to_active") == []


# ---------------------------------------------------------------------------- options
def test_worker_options_name_a_bad_value() -> None:
    with pytest.raises(InvalidOptionsError, match="lock_duration"):
        WorkerOptions.create(lock_duration=0)
    options = WorkerOptions.create(lock_duration=9_000, limiter={"max": 2, "duration": 10})
    assert options.lock_renew_time == 4_500 and options.limiter is not None
    assert options.changed(lock_duration=1).lock_renew_time == 4_500
    with pytest.raises(InvalidOptionsError, match="drain_delay"):
        options.changed(drain_delay=0)
