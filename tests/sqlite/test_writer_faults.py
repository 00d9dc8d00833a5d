"""The SQLite writer cannot be poisoned: a record it cannot store (one that came past the
gate, injected here straight into the backend) is left out, and every other change commits;
a full disk holds the changes until there is room again."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

import psyq
from psyq.backends.base import JobRecord, NewJob
from psyq.backends.sqlite import rows

BAD_RECORDS = [
    NewJob("name\ud800", "{}", {}, None),  # a lone surrogate in the name
    NewJob("data", '{"v":"\udc80"}', {}, None),  # ... in the data
    NewJob("id", "{}", {"jobId": "id\ud800"}, None),  # ... in the id (an outer column)
    NewJob("big", "{}", {}, 2**70),  # an integer past int64
]
GOOD = 49


async def add_around_bad_records(url: str) -> list[str]:
    """Add GOOD jobs, the bad records one by one, GOOD more; return the good ids."""
    ids: list[str] = []
    queue = psyq.Queue("poison", connection=url)
    try:
        ids += [(await queue.add("ok", {"i": i})).id for i in range(GOOD)]
        backend = await queue._open()
        for record in BAD_RECORDS:
            await asyncio.wait_for(backend.add_jobs("poison", [record]), 10)
        ids += [(await asyncio.wait_for(queue.add("ok", {"i": i}), 10)).id for i in range(GOOD)]
    finally:
        await queue.close()
    return ids


async def stored(url: str) -> dict[str, object]:
    """A fresh open of the file: every job's id and data."""
    return await stored_in(url, "poison")


@pytest.mark.parametrize("durability", ["buffered", "durable"])
async def test_every_acknowledged_job_survives_a_record_that_cannot_be_stored(
    tmp_path: Path, durability: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db?durability={durability}"
    with caplog.at_level(logging.ERROR, "psyq.sqlite"):
        ids = await add_around_bad_records(url)
    jobs = await stored(url)
    assert set(ids) <= set(jobs)
    assert [jobs[i] for i in ids] == [{"i": i} for i in range(GOOD)] * 2
    assert len(jobs) == 2 * GOOD  # the bad records were left out, not half-written
    reported = [r.getMessage() for r in caplog.records if "cannot store job" in r.getMessage()]
    assert len(reported) == len(BAD_RECORDS)  # each named once, with its job id
    assert any("'id\\ud800'" in message for message in reported)


async def test_a_row_that_fails_to_bind_is_written_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should the row check miss a value (here: a row whose finish time SQLite cannot bind,
    with the check switched off), the batch is written again row by row: only the row
    SQLite refuses is left out."""
    job_row = rows.job_row

    def bad_row(store: object, record: JobRecord) -> rows.Row:
        row = job_row(store, record)  # type: ignore[arg-type]
        return (*row[:5], 2**70, *row[6:]) if record.name == "unbindable" else row

    monkeypatch.setattr(rows, "job_row", bad_row)
    monkeypatch.setattr(rows, "unstorable", lambda row: None)
    url = f"sqlite:///{tmp_path}/jobs.db?durability=durable"
    queue = psyq.Queue("poison", connection=url)
    with caplog.at_level(logging.ERROR, "psyq.sqlite"):
        ids = [(await queue.add("ok", {"i": i})).id for i in range(GOOD)]
        await (await queue._open()).add_jobs("poison", [NewJob("unbindable", "{}", {}, None)])
        ids += [(await asyncio.wait_for(queue.add("ok", {"i": i}), 10)).id for i in range(GOOD)]
        await queue.close()
    assert any("row by row" in r.getMessage() for r in caplog.records)
    jobs = await stored(url)
    assert set(ids) <= set(jobs)
    assert len(jobs) == 2 * GOOD


async def test_a_full_disk_holds_the_changes_until_there_is_room(tmp_path: Path) -> None:
    """`max_page_count` makes SQLite answer "database or disk is full", as a full disk does:
    buffered adds go on, a durable add waits for its commit, and once there is room every
    acknowledged job reaches the file."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    queue = psyq.Queue("full", connection=url)
    durable = psyq.Queue("full", connection=url + "?durability=durable")
    try:
        backend = await queue._open()
        db = backend._db  # type: ignore[attr-defined]
        await queue.add("first", {})
        db.flush()
        (pages,) = db._conn.execute("PRAGMA page_count").fetchone()
        db._conn.execute(f"PRAGMA max_page_count = {pages}")
        ids = [(await queue.add("ok", {"pad": "x" * 2000, "i": i})).id for i in range(50)]
        assert not db.flush()  # the disk is full: the changes are kept for the next try
        with pytest.raises(psyq.PsyqError, match="the last write failed"):
            await backend.check_ready()  # what /readyz and psyq check report
        waiting = asyncio.ensure_future(durable.add("durable", {}))
        await asyncio.sleep(0.3)  # sleep: a while in which the add must stay unacknowledged
        assert not waiting.done()  # not acknowledged before a commit holds it
        db._conn.execute("PRAGMA max_page_count = 1073741823")
        ids.append((await asyncio.wait_for(waiting, 10)).id)
        await backend.check_ready()  # written again: ready
    finally:
        await durable.close()
        await queue.close()
    jobs = await stored_in(url, "full")
    assert set(ids) <= set(jobs) and len(jobs) == 52


async def stored_in(url: str, name: str) -> dict[str, object]:
    async with psyq.Queue(name, connection=url) as queue:
        return {job.id: job.data for job in await queue.get_jobs()}


def test_a_retried_batch_keeps_the_later_change_of_a_job_or_queue() -> None:
    """A failed flush is retried merged with the next one: a job deleted after it was
    written (or added again after it was deleted), and a queue obliterated after its
    writes, end as the later batch left them."""
    from psyq.backends.sqlite.batch import Batch, merge

    def row(key: str, job_id: str) -> tuple[str, ...]:
        return (key, job_id, "waiting")

    first = Batch(
        upserts=[row("a", "1"), row("b", "9")],
        deletes=[("a", "2")],
        metas=[("b", "{}")],
    )
    second = Batch(upserts=[row("a", "2")], deletes=[("a", "1")], drops=[("b",)])
    merged = merge([first, second])
    assert merged.upserts == [row("a", "2")]
    assert merged.deletes == [("a", "1")]
    assert merged.metas == [] and merged.drops == [("b",)]
