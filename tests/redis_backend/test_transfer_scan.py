"""`transfer.scan_queues`: one SCAN finds what `list_queues` and each queue's dedup listing
find with one SCAN per key kind and per queue."""

from __future__ import annotations

import uuid
from typing import Any

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import QueueMeta
from psyq.backends.redis import transfer
from psyq.backends.redis.backend import RedisBackend


def steady(meta: QueueMeta) -> dict[str, Any]:
    """The metadata without the dedup expiries (now + ttl: they move by a few ms)."""
    dedup = {key: [owner, expiry is None] for key, (owner, expiry) in meta["dedup"].items()}
    return {**meta, "dedup": dedup}


async def test_one_scan_finds_the_queues_and_dedup_keys(url: str) -> None:
    prefixed = f"{url}?prefix=scan{uuid.uuid4().hex[:8]}"
    async with psyq.Queue("alpha", connection=prefixed) as alpha:
        await alpha.add("a", {"i": 1}, deduplication={"id": "once"})
        await alpha.add("b", {"i": 2}, deduplication={"id": "twice", "ttl": 60_000})
        await alpha.add("c", None, job_id="de")  # its logs key looks like a dedup key
        job = await alpha.add("e", None, job_id="ev1")
        await job.log("row")
    async with psyq.Queue("beta", connection=prefixed) as beta:
        await beta.add("x", None, delay=60_000)
        await beta.pause()
    backend = await open_backend(prefixed)
    try:
        assert isinstance(backend, RedisBackend)
        await backend.add_log("alpha", "de", "a log row", None)
        found = await transfer.scan_queues(backend)
        assert sorted(found.names) == await backend.list_queues() == ["alpha", "beta"]
        for name in ("alpha", "beta"):
            scanned = await transfer.get_queue_meta(backend, name, found.dedup.get(name, []))
            assert steady(scanned) == steady(await transfer.get_queue_meta(backend, name))
        meta = await transfer.get_queue_meta(backend, "alpha", found.dedup["alpha"])
        assert sorted(meta["dedup"]) == ["once", "twice"]
        for name in ("alpha", "beta"):
            await backend.obliterate(name, True)
    finally:
        await release_backend(backend)
