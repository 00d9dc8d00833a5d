"""Adding jobs: what add returns, ids, options, validation, bulk adds, queue defaults."""

from __future__ import annotations

import pytest

import psyq

from .conftest import WorkerFactory, now_ms, wait_state

ALL_STATES = (
    "waiting",
    "active",
    "completed",
    "failed",
    "delayed",
    "prioritized",
    "waiting-children",
    "paused",
)


async def total_jobs(queue: psyq.Queue) -> int:
    return sum((await queue.get_job_counts(*ALL_STATES)).values())


async def test_add_returns_job_with_its_fields(queue: psyq.Queue) -> None:
    before = now_ms()
    job = await queue.add("send", {"to": "a@b.c"}, {"attempts": 2})
    assert isinstance(job, psyq.Job)
    assert job.id
    assert job.name == "send"
    assert job.data == {"to": "a@b.c"}
    assert job.opts["attempts"] == 2
    assert job.queue_name == queue.name
    assert job.timestamp >= before - 1000


async def test_added_job_is_readable_by_id(queue: psyq.Queue) -> None:
    job = await queue.add("send", {"n": [1, 2, 3]})
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert (stored.id, stored.name, stored.data) == (job.id, "send", {"n": [1, 2, 3]})


async def test_data_defaults_to_none(queue: psyq.Queue) -> None:
    job = await queue.add("empty")
    stored = await queue.get_job(job.id)
    assert stored is not None
    assert stored.data is None


async def test_auto_ids_are_increasing_integer_strings(queue: psyq.Queue) -> None:
    jobs = [await queue.add("n", i) for i in range(5)]
    ids = [job.id for job in jobs]
    assert all(isinstance(i, str) and i.isdigit() for i in ids)
    numbers = [int(i) for i in ids]
    assert numbers == sorted(numbers)
    assert len(set(numbers)) == 5


async def test_custom_job_id_is_used(queue: psyq.Queue) -> None:
    job = await queue.add("send", {}, {"jobId": "order-17"})
    assert job.id == "order-17"
    assert (await queue.get_job("order-17")) is not None


async def test_snake_case_job_id_keyword(queue: psyq.Queue) -> None:
    job = await queue.add("send", {}, job_id="order-18")
    assert job.id == "order-18"


async def test_duplicate_custom_job_id_returns_existing_job(queue: psyq.Queue) -> None:
    first = await queue.add("send", {"v": 1}, jobId="dup")
    again = await queue.add("send", {"v": 2}, jobId="dup")
    assert again.id == first.id == "dup"
    assert again.data == {"v": 1}
    assert await total_jobs(queue) == 1
    stored = await queue.get_job("dup")
    assert stored is not None
    assert stored.data == {"v": 1}


@pytest.mark.parametrize("bad_id", ["123", 123, "-5", "a:b", ""])
async def test_bad_job_id_is_rejected_and_nothing_written(
    queue: psyq.Queue, bad_id: object
) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="jobId"):
        await queue.add("send", {}, {"jobId": bad_id})
    assert await total_jobs(queue) == 0


@pytest.mark.parametrize(
    ("opts", "kwargs"),
    [
        ({"removeOnComplete": 5, "stackTraceLimit": 3}, {}),
        ({"remove_on_complete": 5, "stack_trace_limit": 3}, {}),
        (None, {"remove_on_complete": 5, "stack_trace_limit": 3}),
        (None, {"removeOnComplete": 5, "stackTraceLimit": 3}),
        ({"removeOnComplete": 1}, {"remove_on_complete": 5, "stackTraceLimit": 3}),
    ],
    ids=["camel-dict", "snake-dict", "snake-kw", "camel-kw", "kw-wins"],
)
async def test_option_names_camel_and_snake(
    queue: psyq.Queue, opts: dict[str, object] | None, kwargs: dict[str, object]
) -> None:
    job = await queue.add("send", {}, opts, **kwargs)
    stored = await queue.get_job(job.id)
    assert stored is not None
    for seen in (job.opts, stored.opts):
        assert seen["removeOnComplete"] == 5
        assert seen["stackTraceLimit"] == 3
        assert "remove_on_complete" not in seen


async def test_telemetry_travels_with_the_job(
    queue: psyq.Queue, make_worker: WorkerFactory
) -> None:
    """BullMQ's `telemetry` option (the producer's trace context as text) is stored with the
    job and handed to its worker as it was given."""
    context = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    telemetry = {"metadata": context, "omitContext": False}
    job = await queue.add("send", {}, telemetry=telemetry)
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.opts["telemetry"] == telemetry
    seen: list[object] = []
    make_worker(lambda job: seen.append(job.opts.get("telemetry")))
    await wait_state(queue, job.id, "completed")
    assert seen == [telemetry]


async def test_unknown_option_is_named_and_nothing_written(queue: psyq.Queue) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="bogusOption"):
        await queue.add("send", {}, {"bogusOption": 1})
    with pytest.raises(psyq.InvalidOptionsError, match="not_an_option"):
        await queue.add("send", {}, not_an_option=1)
    assert await total_jobs(queue) == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("attempts", 0),
        ("attempts", "3"),
        ("delay", -1),
        ("priority", -1),
        ("priority", 2**21),
        ("lifo", "yes"),
        ("backoff", {"delay": 10}),
        ("backoff", {"type": "fixed", "delay": -5}),
        ("removeOnComplete", -1),
        ("removeOnFail", {"age": "old"}),
        ("keepLogs", -1),
        ("sizeLimit", 0),
        ("timestamp", 1.5),
        ("telemetry", {"metadata": 5}),
        ("telemetry", {"omitContext": "no"}),
        ("telemetry", {"traceparent": "x"}),
    ],
)
async def test_bad_option_value_is_named_and_nothing_written(
    queue: psyq.Queue, name: str, value: object
) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match=name):
        await queue.add("send", {}, {name: value})
    assert await total_jobs(queue) == 0


@pytest.mark.parametrize("data", [object(), {"x": {1, 2}}, float("nan"), b"bytes"])
async def test_non_json_data_is_rejected_and_nothing_written(
    queue: psyq.Queue, data: object
) -> None:
    with pytest.raises(psyq.InvalidDataError):
        await queue.add("send", data)
    assert await total_jobs(queue) == 0


async def test_size_limit_rejects_larger_data(queue: psyq.Queue) -> None:
    with pytest.raises(psyq.InvalidDataError, match="sizeLimit"):
        await queue.add("send", {"blob": "x" * 100}, sizeLimit=50)
    assert await total_jobs(queue) == 0


async def test_size_limit_accepts_smaller_data(queue: psyq.Queue) -> None:
    job = await queue.add("send", {"blob": "x"}, size_limit=50)
    assert job.data == {"blob": "x"}


async def test_add_bulk_adds_all_in_order(queue: psyq.Queue) -> None:
    jobs = await queue.add_bulk(
        [
            {"name": "a", "data": 1},
            {"name": "b", "data": 2, "opts": {"priority": 3}},
            {"name": "c", "data": 3, "opts": {"jobId": "c-id"}},
        ]
    )
    assert [job.name for job in jobs] == ["a", "b", "c"]
    assert [job.data for job in jobs] == [1, 2, 3]
    assert jobs[2].id == "c-id"
    assert await total_jobs(queue) == 3


async def test_add_bulk_empty_returns_empty(queue: psyq.Queue) -> None:
    assert await queue.add_bulk([]) == []


async def test_add_bulk_bad_option_adds_nothing(queue: psyq.Queue) -> None:
    entries = [
        {"name": "a", "data": 1},
        {"name": "b", "data": 2, "opts": {"attempts": 0}},
    ]
    with pytest.raises(psyq.InvalidOptionsError, match="attempts"):
        await queue.add_bulk(entries)
    assert await total_jobs(queue) == 0


async def test_add_bulk_bad_data_adds_nothing(queue: psyq.Queue) -> None:
    entries = [{"name": "a", "data": 1}, {"name": "b", "data": object()}]
    with pytest.raises(psyq.InvalidDataError):
        await queue.add_bulk(entries)
    assert await total_jobs(queue) == 0


async def test_add_bulk_entry_without_name_adds_nothing(queue: psyq.Queue) -> None:
    with pytest.raises(psyq.InvalidOptionsError):
        await queue.add_bulk([{"name": "a"}, {"data": 2}])
    assert await total_jobs(queue) == 0


async def test_default_job_options_merge_under_per_job_options(
    backend_url: str, queue_name: str
) -> None:
    defaults = {"attempts": 3, "priority": 1, "remove_on_fail": 7}
    async with psyq.Queue(queue_name, connection=backend_url, default_job_options=defaults) as q:
        job = await q.add("send", {}, priority=2)
        bulk = await q.add_bulk([{"name": "b", "data": None}])
    assert job.opts["attempts"] == 3
    assert job.opts["priority"] == 2
    assert job.opts["removeOnFail"] == 7
    assert bulk[0].opts["attempts"] == 3


async def test_bad_default_job_options_are_rejected(backend_url: str, queue_name: str) -> None:
    with pytest.raises(psyq.InvalidOptionsError, match="attempts"):
        psyq.Queue(queue_name, connection=backend_url, default_job_options={"attempts": 0})


async def test_queue_context_manager_closes(backend_url: str, queue_name: str) -> None:
    async with psyq.Queue(queue_name, connection=backend_url) as q:
        await q.add("a")
    with pytest.raises(psyq.ClosedError):
        await q.add("b")
