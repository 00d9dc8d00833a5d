"""A Redis export page (one MULTI/EXEC of reads, its replies decoded) holds exactly what the
job structures hold: every field of each hash, logs, due times and flow links, checked
against plain reads of the same keys."""

from __future__ import annotations

from typing import Any

import hiredis
import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import Completed, ExportPage, Failed, FetchRequest, JobRecord, NewJob
from psyq.backends.redis import RedisBackend, transfer
from psyq.backends.redis.jobs import (
    DELAY_SPAN,
    RECORD_FIELDS,
    record_from_hash,
    record_from_values,
)
from psyq.backends.redis.scripts import pack_command
from psyq.errors import PsyqError


def test_record_from_hash_reads_every_field() -> None:
    fields = {
        "name": "n", "data": '{"a":1}', "opts": '{"attempts":3,"kl":5}', "timestamp": "10",
        "delay": "20", "priority": "3", "progress": '{"done":1}', "atm": "2", "ats": "4",
        "stc": "1", "processedOn": "30", "finishedOn": "40", "returnvalue": "7",
        "failedReason": "boom", "stacktrace": '["at a","at b"]', "parentKey": "bull:p:9",
        "pb": "w1",
    }  # fmt: skip
    assert record_from_hash("q", "5", fields) == JobRecord(
        id="5", queue="q", name="n", data='{"a":1}', opts={"attempts": 3, "keepLogs": 5},
        timestamp=10, delay=20, priority=3, progress={"done": 1}, attempts_made=2,
        attempts_started=4, stalled_counter=1, processed_on=30, finished_on=40,
        returnvalue="7", failed_reason="boom", stacktrace=["at a", "at b"],
        parent_key="bull:p:9", processed_by="w1",
    )  # fmt: skip
    bare = record_from_hash("q", "6", {"name": "m", "data": "1", "timestamp": "5"})
    assert bare == JobRecord(id="6", queue="q", name="m", data="1", opts={}, timestamp=5)
    assert record_from_hash("q", "7", {"attemptsMade": "3", "delay": "1.5e3"}).delay == 1500


def test_record_from_values_as_a_script_returns_them_equals_record_from_hash() -> None:
    """Values of RECORD_FIELDS in order (None for absent fields, as HMGET returns them); empty
    texts stay empty texts."""
    hashes = [
        {"name": "n", "data": "1", "timestamp": "5", "returnvalue": "", "progress": ""},
        {"name": "", "data": "", "failedReason": "", "pb": "", "parentKey": "", "atm": "2"},
        {"attemptsMade": "4", "stacktrace": "[]", "opts": "", "processedOn": "7"},
    ]
    for fields in hashes:
        values = [fields.get(name) for name in RECORD_FIELDS]
        assert record_from_values("q", "1", values) == record_from_hash("q", "1", fields)
    assert record_from_hash("q", "1", hashes[0]).returnvalue == ""


def test_numbers_written_as_floats_read_as_whole_numbers() -> None:
    """Any number field may hold a float ("1.5e3": a hash written by another tool); it reads
    as the whole number, and absent or empty ones as before. Options that are not JSON
    still fail (not taken for a number's fault)."""
    fields = {
        "timestamp": "1.5e3", "delay": "2.9", "priority": "-0.5", "atm": "", "attemptsMade":
        "3.0", "ats": "4e0", "stc": "1.5", "processedOn": "0.5", "finishedOn": "",
    }  # fmt: skip
    record = record_from_hash("q", "1", fields)
    assert (record.timestamp, record.delay, record.priority) == (1500, 2, 0)
    assert (record.attempts_made, record.attempts_started, record.stalled_counter) == (3, 4, 1)
    assert (record.processed_on, record.finished_on) == (0, None)
    with pytest.raises(ValueError):
        record_from_hash("q", "1", {"opts": "{not json", "timestamp": "1.5"})
    with pytest.raises(ValueError):
        record_from_hash("q", "1", {"delay": "soon"})


async def expected_page(raw: Any, key: str, queue: str, ids_states: list[tuple[str, str]]) -> Any:
    """The page built from plain reads of each job's keys."""
    page = ExportPage([], {}, None)
    for job_id, state in ids_states:
        record = record_from_hash(queue, job_id, await raw.hgetall(f"{key}:{job_id}"))
        record.state = state
        page.jobs.append(record)
        logs = await raw.lrange(f"{key}:{job_id}:logs", 0, -1)
        if logs:
            page.logs[job_id] = logs
        score = await raw.zscore(f"{key}:delayed", job_id)
        if score is not None:
            page.due[job_id] = int(score) // DELAY_SPAN
        pending = await raw.smembers(f"{key}:{job_id}:dependencies")
        processed = await raw.hgetall(f"{key}:{job_id}:processed")
        ignored = await raw.hgetall(f"{key}:{job_id}:failed")
        failed = await raw.zrange(f"{key}:{job_id}:unsuccessful", 0, -1)
        if pending or processed or ignored or failed:
            page.deps[job_id] = {
                "pending": sorted(pending),
                "processed": processed,
                "failed": {child: await raw.hget(child, "failedReason") for child in failed},
                "ignored": ignored,
            }
    return page


@pytest.mark.parametrize("path", ["wire", "redis-py", "redis-py-resp3"])
async def test_an_export_page_holds_what_the_keys_hold(
    url: str, queue_name: str, raw: Any, path: str
) -> None:
    """The same page through psyq's own connection and through redis-py's (a URL with
    other options than host, port, db and credentials), there in RESP2 and RESP3 (hashes
    come as maps)."""
    if path != "wire":
        url += ("&" if "?" in url else "?") + "socket_timeout=30"
    if path == "redis-py-resp3":
        url += "&protocol=3"
    key = f"bull:{queue_name}"
    flow = psyq.FlowProducer(connection=url)
    tree = await flow.add(
        {
            "name": "parent",
            "queue_name": queue_name,
            "data": {"x": 'é"/'},
            "children": [
                {"name": "kid", "queue_name": queue_name},
                {"name": "kid2", "queue_name": queue_name},
            ],
        }
    )
    await flow.close()
    backend = await open_backend(url)
    assert isinstance(backend, RedisBackend), backend
    assert (backend._wire is None) == (path != "wire")
    try:
        await backend.add_jobs(queue_name, [NewJob("later", "null", {"delay": 60_000})])
        await backend.add_jobs(queue_name, [NewJob("urgent", "[1]", {"priority": 4})])
        await backend.add_jobs(queue_name, [NewJob("w", str(i), {}) for i in range(3)])
        taken = await backend.move_to_active(queue_name, FetchRequest(["t1", "t2"], 60_000))
        await backend.add_log(queue_name, taken[0].id, "line one", None)
        await backend.add_log(queue_name, taken[0].id, "line two", None)
        await backend.move_to_finished(queue_name, taken[0].id, "t1", Completed('{"ok":1}'))
        await backend.move_to_finished(queue_name, taken[1].id, "t2", Failed("bad", ["at x"]))
        page = await backend.export_jobs(queue_name, None, 100)
        ids_states = [(job.id, job.state or "") for job in page.jobs]
        assert page.next_cursor is None and len(ids_states) == 8
        assert {tree.job.id, taken[0].id, taken[1].id} <= {job_id for job_id, _ in ids_states}
        assert page == await expected_page(raw, key, queue_name, ids_states)
        assert page.logs == {taken[0].id: ["line one", "line two"]}
        assert list(page.deps) == [tree.job.id] and len(page.due) == 1
        links = page.deps[tree.job.id]
        assert links["processed"] == {f"{key}:{taken[0].id}": '{"ok":1}'}
        assert links["failed"] == {f"{key}:{taken[1].id}": "bad"}
    finally:
        await release_backend(backend)
    states = sorted(state for _, state in ids_states)
    assert states == sorted(
        ["completed", "delayed", "failed", "prioritized", "waiting", "waiting-children"]
        + ["waiting"] * 2
    )


async def test_a_job_removed_after_its_id_was_read_is_left_out(
    url: str, queue_name: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live queue: ids are read first, then the jobs; one removed in between (its hash,
    logs and due time gone) is not in the page, and the others keep their order."""
    backend = await open_backend(url)
    later = [NewJob("later", str(i), {"delay": 60_000}) for i in range(3)]
    await backend.add_jobs(queue_name, later)
    key = f"bull:{queue_name}"
    ids = await raw.zrange(f"{key}:delayed", 0, -1)
    await backend.add_log(queue_name, ids[1], "row", None)
    read_slice = transfer._slice

    async def slice_then_remove(*args: Any) -> list[str]:
        found = await read_slice(*args)
        await raw.delete(f"{key}:{ids[1]}", f"{key}:{ids[1]}:logs")
        return found

    monkeypatch.setattr(transfer, "_slice", slice_then_remove)
    try:
        page = await backend.export_jobs(queue_name, None, 10)
    finally:
        await release_backend(backend)
    assert [job.id for job in page.jobs] == [ids[0], ids[2]]
    assert list(page.due) == [ids[0], ids[2]] and page.logs == {}


async def test_jobs_written_alike_or_not_read_as_their_hashes_say(
    url: str, queue_name: str, raw: Any
) -> None:
    """Hashes with other fields in other orders (written by other tools), numbers written as
    floats, and a hash left with none of the fields a record is read from (left out, as a
    job removed while read): each job of the page reads as its hash says."""
    key = f"bull:{queue_name}"
    hashes = {
        "a": {"name": "a", "data": "1", "timestamp": "5"},
        "b": {"timestamp": "7", "data": "2", "name": "b", "atm": "2", "opts": '{"kl":3}'},
        "c": {"attemptsMade": "3", "delay": "1.5e3", "processedOn": "2.5e1", "name": "c"},
        "d": {"pb": "w", "stacktrace": '["x"]', "progress": "40", "finishedOn": "9"},
        "e": {"lockToken": "t"},
        "f": {"name": "f", "data": "3", "timestamp": "6"},
    }
    for job_id, fields in hashes.items():
        await raw.hset(f"{key}:{job_id}", mapping=fields)
    await raw.lpush(f"{key}:wait", *hashes)  # the next to be taken ("a") at the right end
    backend = await open_backend(url)
    try:
        page = await backend.export_jobs(queue_name, None, 100)
    finally:
        await release_backend(backend)
    assert [job.id for job in page.jobs] == ["a", "b", "c", "d", "f"]
    assert page == await expected_page(raw, key, queue_name, [(j.id, "waiting") for j in page.jobs])
    assert (page.jobs[2].delay, page.jobs[2].processed_on) == (1500, 25)


async def test_an_error_reply_in_a_page_read_fails_the_export(
    url: str, queue_name: str, raw: Any
) -> None:
    """A job key that is not a hash (WRONGTYPE inside the MULTI/EXEC) fails the page with
    an error naming the queue, among thousands of good replies."""
    key = f"bull:{queue_name}"
    ids = [str(i) for i in range(3000)]
    for job_id in ids:
        await raw.hset(f"{key}:{job_id}", mapping={"name": "n", "data": "1", "timestamp": "5"})
    await raw.delete(f"{key}:2999")
    await raw.set(f"{key}:2999", "not a hash")
    await raw.lpush(f"{key}:wait", *ids)
    backend = await open_backend(url)
    try:
        with pytest.raises(PsyqError, match=f"export failed on queue '{queue_name}'"):
            await backend.export_jobs(queue_name, None, 4000)
    finally:
        await release_backend(backend)


def test_chunks_flagged_by_exists_name_their_jobs() -> None:
    """The jobs read further are those of the chunks whose EXISTS found a key, less the
    jobs removed meanwhile."""
    ids = [str(i) for i in range(2 * transfer._CHUNK + 5)]
    chunks = [ids[: transfer._CHUNK], ids[transfer._CHUNK : 2 * transfer._CHUNK]]
    assert transfer._flagged(ids, [0, 2, 1], set()) == chunks[1] + ids[2 * transfer._CHUNK :]
    assert transfer._flagged(ids, [1, 0, 0], {"3"}) == [i for i in chunks[0] if i != "3"]
    assert transfer._flagged(ids, [0, 0, 0], set()) == []


def test_a_page_packs_the_commands_redis_reads() -> None:
    """The page's HGETALLs, packed run by run of ids of one length, are the commands one
    by one; an EXISTS names every key once (in any order)."""
    ids = ["1", "2", "33", "44", "5", "é6", "777"]
    packed = transfer._hgetalls(b"bull:q:", [job_id.encode() for job_id in ids])
    assert packed == b"".join(pack_command("HGETALL", f"bull:q:{i}") for i in ids)
    reader = hiredis.Reader(encoding="utf-8")
    alternating = ["1", "22", "é", "3", "44", "5", "666", "7", "88"]  # more runs than _RUNS
    for chosen in (["1", "22", "é"], alternating):
        reader.feed(transfer._exists(b"bull:q:", [i.encode() for i in chosen], (b":a", b":bb")))
        name, *keys = reader.gets()
        assert name == "EXISTS"
        assert sorted(keys) == sorted(f"bull:q:{i}{s}" for i in chosen for s in (":a", ":bb"))
