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
from psyq.backends.redis import transfer
from psyq.backends.redis.jobs import (
    DELAY_SPAN,
    RECORD_FIELDS,
    record_from_hash,
    record_from_values,
)
from psyq.backends.redis.scripts import pack_command


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
    """An export's HMGET returns the values of RECORD_FIELDS, None for absent fields; empty
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


@pytest.mark.parametrize("path", ["wire", "redis-py"])
async def test_an_export_page_holds_what_the_keys_hold(
    url: str, queue_name: str, raw: Any, path: str
) -> None:
    """The same page through psyq's own connection and through redis-py's (a URL with
    other options than host, port, db and credentials)."""
    if path == "redis-py":
        url += ("&" if "?" in url else "?") + "socket_timeout=30"
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
    assert (backend._wire is None) == (path == "redis-py")
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


def test_a_page_packs_the_commands_redis_reads() -> None:
    """The page's HMGETs, packed run by run of ids of one length, are the commands one by
    one; an EXISTS names every key once (in any order)."""
    ids = ["1", "2", "33", "44", "5", "é6", "777"]
    packed = transfer._hmgets(b"bull:q:", [job_id.encode() for job_id in ids])
    assert packed == b"".join(pack_command("HMGET", f"bull:q:{i}", *RECORD_FIELDS) for i in ids)
    exists = transfer._exists(b"bull:q:", [b"1", b"22", "é".encode()], (b":a", b":bb"))
    reader = hiredis.Reader(encoding="utf-8")
    reader.feed(exists)
    name, *keys = reader.gets()
    assert name == "EXISTS"
    assert sorted(keys) == sorted(f"bull:q:{i}{s}" for i in ("1", "22", "é") for s in (":a", ":bb"))
