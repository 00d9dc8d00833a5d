"""Redis Cluster: a local 3-node cluster (started once per run by the `redis_cluster`
fixture) with queue-level hash tags under BullMQ's default prefix `bull`, so the queues of
this file land on different nodes. The whole conformance suite also runs on the cluster
(backend id `redis-cluster`, prefix `{psyqtest}`)."""

from __future__ import annotations

import asyncio
import gc
import uuid
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.redis.cluster import hash_tag
from tests.conformance.conftest import Recorder, wait_state
from tests.polling import eventually


def tagged(tag: str | None = None, name: str = "q") -> str:
    """A fresh queue name carrying a hash tag (its own, or `tag` to share one slot)."""
    return f"{{{tag or uuid.uuid4().hex[:12]}}}{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def cluster_url(redis_cluster: Any) -> str:
    url: str = redis_cluster()
    return url


@pytest.fixture
async def raw(cluster_url: str) -> AsyncIterator[Any]:
    client = RedisCluster.from_url(cluster_url.replace("redis+cluster", "redis", 1))
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def queue(cluster_url: str) -> AsyncIterator[psyq.Queue]:
    q = psyq.Queue(tagged(), connection=cluster_url)
    try:
        yield q
    finally:
        await q.close()


@pytest.fixture
async def worker_for(cluster_url: str) -> AsyncIterator[Any]:
    workers: list[psyq.Worker] = []

    def start(queue: str, processor: Any, **options: Any) -> psyq.Worker:
        worker = psyq.Worker(queue, processor, connection=cluster_url, **options)
        workers.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in workers:
            await asyncio.wait_for(worker.close(force=True), 10)


async def test_jobs_complete_fail_and_retry_with_events(
    queue: psyq.Queue, worker_for: Any, cluster_url: str, raw: Any
) -> None:
    events = psyq.QueueEvents(queue.name, connection=cluster_url, last_event_id="0")
    rec = Recorder(events, "completed", "failed", "retries-exhausted")
    tries: dict[str, int] = {}

    def process(job: psyq.Job) -> int:
        tries[job.name] = tries.get(job.name, 0) + 1
        if job.name == "flaky" and tries["flaky"] < 2:
            raise RuntimeError("first try fails")
        if job.name == "broken":
            raise ValueError("always fails")
        return int(job.data["n"]) * 2

    try:
        ok = await queue.add("ok", {"n": 21})
        flaky = await queue.add("flaky", {"n": 1}, attempts=2)
        broken = await queue.add("broken", {"n": 0}, attempts=2, backoff=10)
        worker_for(queue.name, process)
        await rec.wait("completed", 2)
        await rec.wait("retries-exhausted")
        assert (await queue.get_job(ok.id)).returnvalue == 42  # type: ignore[union-attr]
        assert (await queue.get_job(flaky.id)).attempts_made == 2  # type: ignore[union-attr]
        failed = await queue.get_job(broken.id)
        assert failed is not None and failed.failed_reason == "always fails"
        assert tries == {"ok": 1, "flaky": 2, "broken": 2}
        # BullMQ's layout, every key of the queue in the slot of its tag
        assert await raw.zcard(f"bull:{queue.name}:completed") == 2
        assert await raw.hget(f"bull:{queue.name}:{ok.id}", "returnvalue") == b"42"
    finally:
        await events.close()


async def test_delayed_and_prioritized_jobs(queue: psyq.Queue, worker_for: Any) -> None:
    order: list[str] = []
    # Due well after the worker starts: once due it would run before the prioritized jobs.
    later = await queue.add("later", delay=1500)
    await queue.add("low", priority=5)
    await queue.add("high", priority=1)
    await queue.add("plain")
    assert await queue.get_job_counts("delayed", "prioritized", "waiting") == {
        "delayed": 1,
        "prioritized": 2,
        "waiting": 1,
    }
    worker_for(queue.name, lambda job: order.append(job.name))
    await wait_state(queue, later.id, "completed", timeout=10)
    assert order == ["plain", "high", "low", "later"]


async def test_add_bulk_bigger_than_one_script_call(queue: psyq.Queue, worker_for: Any) -> None:
    """Past 1,000 jobs a bulk goes as several calls in one MULTI/EXEC (one slot)."""
    jobs = await queue.add_bulk([{"name": "j", "data": i} for i in range(2500)])
    assert jobs[0].id == "1" and jobs[-1].id == "2500"
    worker_for(queue.name, lambda job: None, concurrency=50)

    async def all_completed() -> bool:
        return (await queue.get_job_counts("completed"))["completed"] == 2500

    # not "drained": it says the wait list is empty while the last jobs may still settle
    await eventually(all_completed, timeout=30)
    assert await queue.get_job_counts("completed", "waiting", "active") == {
        "completed": 2500,
        "waiting": 0,
        "active": 0,
    }


async def add_tagged_flow(url: str, children_data: list[Any]) -> tuple[Any, str, str]:
    """A parent with one child per `children_data` item, in two queues sharing a hash tag:
    (the flow's node, the parents' queue, the children's queue)."""
    tag = uuid.uuid4().hex[:12]
    parents, children = tagged(tag, "parents"), tagged(tag, "children")
    async with psyq.FlowProducer(connection=url) as producer:
        node = await producer.add(
            {
                "name": "parent",
                "queue_name": parents,
                "children": [
                    {"name": "child", "queue_name": children, "data": data}
                    for data in children_data
                ],
            }
        )
    return node, parents, children


async def test_a_flow_whose_queues_share_a_tag(cluster_url: str, worker_for: Any) -> None:
    node, parents, children = await add_tagged_flow(cluster_url, [{"i": i} for i in range(3)])
    worker_for(children, lambda job: job.data["i"] + 1)
    worker_for(parents, lambda job: job.get_children_values())
    async with psyq.Queue(parents, connection=cluster_url) as queue:
        await wait_state(queue, node.job.id, "completed")
        done = await queue.get_job(node.job.id)
    assert done is not None
    assert sorted(done.returnvalue.values()) == [1, 2, 3]


async def test_an_export_page_is_read_on_the_node_of_its_queue(cluster_url: str) -> None:
    """export_jobs reads each page in one MULTI/EXEC, sent to the node holding the queue's
    slot; the flow's links and a log row come with it."""
    node, parents, children = await add_tagged_flow(cluster_url, [None, None])
    logged = node.children[0].job.id
    backend = await open_backend(cluster_url)
    try:
        await backend.add_log(children, logged, "row", None)
        page = await backend.export_jobs(parents, None, 10)
        kids = await backend.export_jobs(children, None, 10)
    finally:
        await release_backend(backend)
    assert [(job.id, job.state) for job in page.jobs] == [(node.job.id, "waiting-children")]
    assert len(page.deps[node.job.id]["pending"]) == 2
    assert [job.name for job in kids.jobs] == ["child", "child"]
    assert kids.logs == {logged: ["row"]}


async def test_a_flow_across_slots_is_refused_before_writing(cluster_url: str) -> None:
    parents, children = tagged(name="parents"), tagged(name="children")
    async with psyq.FlowProducer(connection=cluster_url) as producer:
        with pytest.raises(psyq.InvalidOptionsError, match="different Redis Cluster slots"):
            await producer.add(
                {
                    "name": "p",
                    "queue_name": parents,
                    "children": [{"name": "c", "queue_name": children}],
                }
            )
    async with psyq.Queue(parents, connection=cluster_url) as queue:
        assert await queue.count() == 0


async def test_a_queue_without_hash_tag_is_refused_naming_prefix_and_queue(
    cluster_url: str,
) -> None:
    async with psyq.Queue("plain-name", connection=cluster_url) as queue:
        with pytest.raises(psyq.InvalidOptionsError, match=r"'plain-name'.*prefix 'bull'"):
            await queue.add("x")
    tagged_prefix = cluster_url + "?prefix={app}"
    async with psyq.Queue("plain-name", connection=tagged_prefix) as queue:
        job = await queue.add("x")  # the prefix's tag holds every queue in one slot
        assert await queue.get_job_state(job.id) == "waiting"
        await queue.obliterate(force=True)


async def test_scripts_reload_on_every_node_after_a_flush(
    queue: psyq.Queue, cluster_url: str, raw: Any
) -> None:
    await queue.add("before")
    await raw.script_flush()  # every primary forgets the scripts
    job = await queue.add("after")
    assert await queue.get_job_state(job.id) == "waiting"


async def test_bad_cluster_urls(cluster_url: str) -> None:
    with pytest.raises(psyq.InvalidURLError, match="database 0 only"):
        await open_backend(cluster_url.replace("/0", "/3"))


async def test_a_cluster_url_on_a_plain_server_fails_clearly(url: str) -> None:
    plain = url.replace("redis://", "redis+cluster://", 1)
    with pytest.raises(psyq.ConnectionError):
        backend = await open_backend(plain)
        await release_backend(backend)


def test_hash_tags_follow_redis_rules() -> None:
    assert hash_tag("{bull}:q:1") == "bull"
    assert hash_tag("bull:{orders}:1") == "orders"
    assert hash_tag("bull:{}:{x}") is None  # an empty first tag: the whole key is hashed
    assert hash_tag("bull:q") is None


async def test_an_open_cancelled_while_its_blocking_client_reads_the_slots_closes_both(
    cluster_url: str,
) -> None:
    """A Worker closing before its store answered cancels the backend's opening (the compat
    Worker's `ready`); cut while the blocking client reads the slot map (held there by the
    test), the open closes both of its clients: none is left for the garbage collector to
    find unclosed (CI saw `Unclosed RedisCluster client` from this cut)."""
    from psyq.backends.redis.backend import RedisBackend

    backend = RedisBackend(cluster_url)
    new_client = backend._new_client
    reading = asyncio.Event()

    def held_client(blocking: bool = False, name: str | None = None) -> Any:
        client = new_client(blocking=blocking, name=name)
        if blocking:
            initialize = client.initialize

            async def initialize_and_hold() -> None:
                await initialize()
                reading.set()
                await asyncio.Event().wait()  # the read that the cancel cuts

            client.initialize = initialize_and_hold
        return client

    backend._new_client = held_client  # type: ignore[method-assign]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        opening = asyncio.ensure_future(backend.open())
        await asyncio.wait_for(reading.wait(), 10)
        opening.cancel()
        await asyncio.gather(opening, return_exceptions=True)
        assert opening.cancelled()
        del backend, opening
        gc.collect()
    unclosed = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
