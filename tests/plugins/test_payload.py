"""Payload (compression, encryption) and SchemaValidation on real Queues and Workers."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
from cryptography.fernet import Fernet

import psyq
from psyq.plugins.payload import MARKER, Payload
from psyq.plugins.validation import SchemaValidation
from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name
from tests.polling import eventually

KEY, OLD_KEY = Fernet.generate_key(), Fernet.generate_key()
BIG = {"text": "é" * 3000, "nested": [{"n": i, "ok": i % 2 == 0} for i in range(50)]}


@pytest.fixture(params=["memory", "sqlite", "psyq", "redis", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return BACKENDS[request.param](request)


async def run(url: str, name: str, producer: list[Any], worker: list[Any], *jobs: Any) -> Any:
    """Add `jobs` ((name, data, opts) each) with the `producer` plugins, run them with a
    worker with the `worker` plugins; returns what the processor saw, the jobs as stored, and
    the jobs with their states once settled."""
    seen: dict[str, Any] = {}

    async def process(job: psyq.Job) -> str:
        seen[job.id] = job.data
        return "ok"

    async with psyq.Queue(name, connection=url, plugins=producer) as queue:
        added = [await queue.add(job_name, data, **opts) for job_name, data, opts in jobs]
        stored = [await queue.get_job(job.id) for job in added]
        runner = psyq.Worker(name, process, connection=url, plugins=worker)
        try:
            for job in added:
                await eventually(partial(_settled, queue, job.id))
        finally:
            await runner.close()
        final = [await queue.get_job(job.id) for job in added]
        states = [await queue.get_job_state(job.id) for job in added]
    return seen, stored, list(zip(final, states, strict=True))


async def _settled(queue: psyq.Queue, job_id: str) -> bool:
    return await queue.get_job_state(job_id) in ("completed", "failed")


async def test_compressed_and_encrypted_data_round_trips(url: str) -> None:
    name = fresh_name("payload")
    small = {"to": "a@b.c", "emoji": "✓"}
    payload = Payload(keys=[KEY])
    seen, stored, final = await run(
        url, name, [payload], [payload], ("big", BIG, {}), ("small", small, {}), ("none", None, {})
    )
    big_env, small_env, none_env = (job.data for job in stored)
    assert big_env[MARKER] == "zlib+fernet" and small_env[MARKER] == "fernet"
    assert none_env is None
    assert "é" not in json.dumps(big_env) and "a@b.c" not in json.dumps(small_env)
    assert len(json.dumps(big_env)) < len(json.dumps(BIG, ensure_ascii=False))
    assert list(seen.values()) == [BIG, small, None]
    assert [(job.returnvalue, state) for job, state in final] == [("ok", "completed")] * 3
    assert payload.open(big_env) == BIG


async def test_compression_alone_and_untouched_jobs(url: str) -> None:
    name = fresh_name("payload")
    payload = Payload(compress_from=100)
    seen, stored, _ = await run(
        url, name, [payload], [payload], ("big", BIG, {}), ("small", {"a": 1}, {})
    )
    assert stored[0].data[MARKER] == "zlib" and stored[1].data == {"a": 1}
    assert list(seen.values()) == [BIG, {"a": 1}]
    plain = fresh_name("payload")  # added without the plugin: the worker sees it as it is
    seen, _, _ = await run(url, plain, [], [payload], ("x", {MARKER: "other"}, {}))
    assert list(seen.values()) == [{MARKER: "other"}]


async def test_key_rotation_and_a_wrong_key(url: str) -> None:
    name = fresh_name("payload")
    old, rotated = Payload(keys=[OLD_KEY]), Payload(keys=[KEY, OLD_KEY])
    seen, _, _ = await run(url, name, [old], [rotated], ("x", {"v": 1}, {}))
    assert list(seen.values()) == [{"v": 1}]  # the old key still opens it
    wrong = fresh_name("payload")
    seen, _, final = await run(
        url,
        wrong,
        [Payload(keys=[OLD_KEY])],
        [Payload(keys=[KEY])],
        ("x", {"v": 2}, {"attempts": 3}),
    )
    assert seen == {}  # the processor never ran
    [(failed, state)] = final
    assert state == "failed" and failed.attempts_made == 1  # no retries
    assert "does not decrypt" in (failed.failed_reason or "") and failed.id in failed.failed_reason


def test_bad_settings_are_named() -> None:
    with pytest.raises(psyq.PsyqError, match="32 url-safe"):
        Payload(keys=["short"])
    with pytest.raises(psyq.PsyqError, match="change nothing"):
        Payload(compress_from=None)
    with pytest.raises(psyq.PsyqError, match="not valid"):
        SchemaValidation({"send": {"type": "no-such-type"}})


SCHEMA = {
    "type": "object",
    "required": ["to"],
    "properties": {
        "to": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


async def test_validation_refuses_bad_data_and_writes_nothing(url: str) -> None:
    name = fresh_name("valid")
    validation = SchemaValidation({"send": SCHEMA})
    async with psyq.Queue(name, connection=url, plugins=[validation]) as queue:
        with pytest.raises(psyq.JobVetoedError, match=r"data\['tags'\]\[1\]: 5 is not of type"):
            await queue.add("send", {"to": "a", "tags": ["x", 5]})
        with pytest.raises(psyq.JobVetoedError, match="'to' is a required property"):
            await queue.add_bulk(
                [{"name": "send", "data": {"to": "a"}}, {"name": "send", "data": {}}]
            )
        assert await queue.get_job_counts("waiting") == {"waiting": 0}
        assert (await queue.add("other", {"anything": True})).data == {"anything": True}


async def test_validation_on_the_worker_with_payload(url: str) -> None:
    name = fresh_name("valid")
    validation, payload = SchemaValidation({"send": SCHEMA}), Payload(keys=[KEY])
    # A producer without the schema (another service) adds one good and one bad job, packed.
    seen, _, final = await run(
        url,
        name,
        [payload],
        [payload, validation],  # the worker opens the payload before any middleware
        ("send", {"to": "a"}, {}),
        ("send", {"to": 7}, {"attempts": 3}),
    )
    assert list(seen.values()) == [{"to": "a"}]
    (good, good_state), (bad, bad_state) = final
    assert good.returnvalue == "ok" and good_state == "completed"
    assert bad_state == "failed" and bad.attempts_made == 1
    assert "data['to']: 7 is not of type 'string'" in (bad.failed_reason or "")


async def test_validation_listed_after_payload_says_so(url: str) -> None:
    name = fresh_name("valid")
    plugins = [Payload(keys=[KEY]), SchemaValidation({"send": SCHEMA})]
    async with psyq.Queue(name, connection=url, plugins=plugins) as queue:
        with pytest.raises(psyq.JobVetoedError, match="before Payload"):
            await queue.add("send", {"to": "a"})


async def test_data_that_is_not_json_is_refused_before_packing() -> None:
    async with psyq.Queue(fresh_name("payload"), connection="memory://") as queue:
        queue_with = psyq.Queue(queue.name, connection="memory://", plugins=[Payload(keys=[KEY])])
        async with queue_with:
            with pytest.raises(psyq.JobVetoedError, match="not JSON compliant"):
                await queue_with.add("x", {"v": float("nan")})
        assert await queue.get_job_counts("waiting") == {"waiting": 0}


def test_an_envelope_that_opens_to_no_json_says_so() -> None:
    import base64
    import zlib

    broken = {MARKER: "zlib", "payload": base64.b64encode(zlib.compress(b"{nope")).decode()}
    with pytest.raises(psyq.PsyqError, match="not JSON once opened"):
        Payload().open(broken)
