"""SQLite persistence: restart, ownership, crashes, damaged files, retention, schema."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import psyq
from psyq.backends.sqlite.schema import MIGRATIONS, SCHEMA, migrate
from tests.conformance.conftest import Recorder
from tests.polling import eventually

ROOT = Path(__file__).resolve().parents[2]


def url(path: Path, durability: str = "buffered", **params: object) -> str:
    extra = "".join(f"&{k}={v}" for k, v in params.items())
    return f"sqlite:///{path}?durability={durability}{extra}"


def schema_of(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return sorted(conn.execute("SELECT name, sql FROM sqlite_master").fetchall())


def test_every_migration_gives_the_fresh_schema(tmp_path: Path) -> None:
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    fresh.executescript(SCHEMA)
    migrated = sqlite3.connect(tmp_path / "migrated.db", isolation_level=None)
    migrate(migrated, "migrated.db")
    assert schema_of(migrated) == schema_of(fresh)
    assert migrated.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    migrate(migrated, "migrated.db")  # a second time changes nothing
    assert schema_of(migrated) == schema_of(fresh)


async def test_a_restart_brings_everything_back(tmp_path: Path) -> None:
    db = url(tmp_path / "jobs.db")
    async with psyq.Queue("q", connection=db) as queue:
        waiting = [await queue.add("w", {"n": n}) for n in range(3)]
        first = await queue.add("lifo", lifo=True)
        prio = await queue.add("p", priority=3)
        delayed = await queue.add("d", delay=60_000)
        logged = await queue.add("logged", keep_logs=5)
        await logged.log("hello")
        await logged.update_progress({"pct": 40})
        done = await queue.add("done", remove_on_complete=False)
        bad = await queue.add("bad")
        await queue.upsert_job_scheduler("tick", {"every": 3_600_000}, {"name": "tick"})
        await queue.add("dedup", deduplication={"id": "key"})
        # a clean close keeps the taken jobs' locks: they come back once these expire
        worker = psyq.Worker("q", autorun=False, connection=db, lock_duration=1000)
        # take the two finishing jobs by moving the others out of the way first
        taken = [await worker.get_next_job(f"t{i}") for i in range(5)]
        await worker.close()
        assert [j.name for j in taken if j] == ["lifo", "w", "w", "w", "logged"]
        flow = psyq.FlowProducer(connection=db)
        node = await flow.add(
            {"name": "parent", "queue_name": "q", "children": [{"name": "kid", "queue_name": "k"}]}
        )
        await flow.close()
        await queue.pause()
        counts = await queue.get_job_counts()
    async with psyq.Queue("q", connection=db) as queue:
        assert await queue.get_job_counts() == counts
        assert await queue.is_paused()
        assert (await queue.get_job(delayed.id)).delay == 60_000  # type: ignore[union-attr]
        assert await queue.get_job_state(prio.id) == "prioritized"
        assert await queue.get_job_state(node.job.id) == "waiting-children"
        assert (await queue.get_job_logs(logged.id))["logs"] == ["hello"]
        assert (await queue.get_job(logged.id)).progress == {"pct": 40}  # type: ignore[union-attr]
        assert await queue.get_job_schedulers_count() == 1
        assert await queue.get_deduplication_job_id("key") is not None
        assert {first.id, waiting[0].id} <= {j.id for j in await queue.get_active()}
        assert done.id and bad.id
        await queue.resume()
        worker = psyq.Worker("q", lambda job: job.name, connection=db, stalled_interval=50)
        rec = Recorder(worker, "completed")
        await rec.wait("completed", 9, timeout=10)  # the 5 taken ones came back too
        await worker.close()
        kids = psyq.Queue("k", connection=db)
        kid_worker = psyq.Worker("k", lambda job: "kid", connection=db)
        parent_worker = psyq.Worker("q", lambda job: "parent", connection=db)
        await eventually(lambda: queue.get_job_state(node.job.id), timeout=10)
        await eventually(lambda: _state_is(queue, node.job.id, "completed"), timeout=10)
        await kid_worker.close()
        await parent_worker.close()
        await kids.close()


async def _state_is(queue: psyq.Queue, job_id: str, state: str) -> bool:
    return await queue.get_job_state(job_id) == state


async def test_new_ids_continue_after_a_restart(tmp_path: Path) -> None:
    db = url(tmp_path / "jobs.db")
    async with psyq.Queue("q", connection=db) as queue:
        ids = [(await queue.add("x")).id for _ in range(3)]
    async with psyq.Queue("q", connection=db) as queue:
        assert (await queue.add("x")).id == str(int(ids[-1]) + 1)


@pytest.mark.parametrize("cache", [None, 1])
async def test_groups_come_back_after_a_restart(tmp_path: Path, cache: int | None) -> None:
    """Each grouped waiting job reopens in its group's line (the file's `grp` column), in
    order, with the group's settings; its record is read from the file when taken."""
    db = url(tmp_path / "jobs.db") + ("" if cache is None else f"&cache={cache}")
    entries = [
        {
            "name": name,
            "opts": {"group": {"id": name[0], **({"priority": 1} if "p" in name else {})}},
        }
        for name in ("a1", "ap", "a2", "b1", "b2")
    ]
    async with psyq.Queue("q", connection=db) as queue:
        await queue.add_bulk(entries)
        await queue.add("plain")
        await queue.set_group_concurrency("b", 4)
        await queue.pause_group("c")
    async with psyq.Queue("q", connection=db) as queue:
        assert [job.name for job in await queue.get_group_jobs("a")] == ["a1", "a2", "ap"]
        assert await queue.get_group_concurrency("b") == 4
        assert {g["id"]: g["status"] for g in await queue.get_groups()}["c"] == "paused"
        assert (await queue.get_job_counts("waiting"))["waiting"] == 6
        order: list[str] = []
        async with psyq.Worker("q", lambda job: order.append(job.name), connection=db):
            await eventually(lambda: len(order) == 6, "six jobs run")
        assert order == ["plain", "a1", "b1", "a2", "b2", "ap"]


async def test_retention_keeps_the_file_bounded(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    db = url(path, "durable")
    async with psyq.Queue("q", connection=db) as queue:
        await queue.add_bulk([{"name": "x", "opts": {"removeOnComplete": 10}} for _ in range(200)])
        worker = psyq.Worker("q", lambda job: None, connection=db, concurrency=20)
        rec = Recorder(worker, "completed")
        await rec.wait("completed", 200, timeout=20)
        await worker.close()
    rows = sqlite3.connect(path).execute("SELECT count(*) FROM jobs").fetchone()[0]
    assert rows == 10


async def test_buffered_changes_reach_the_file_within_the_flush_window(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with psyq.Queue("q", connection=url(path, flush_ms=20)) as queue:
        await queue.add("x")

        def on_disk() -> int:
            conn = sqlite3.connect(path)
            try:
                return int(conn.execute("SELECT count(*) FROM jobs").fetchone()[0])
            finally:
                conn.close()

        await eventually(on_disk, timeout=2)


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sqlite.helpers", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


async def test_a_second_process_is_refused_naming_the_owner(tmp_path: Path) -> None:
    db = url(tmp_path / "jobs.db", "durable")
    owner = spawn("hold", db)
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "ready"
        queue = psyq.Queue("q", connection=db + "&share=off")  # on: it reaches the owner
        with pytest.raises(psyq.PsyqError, match=f"pid {owner.pid}.*psyq server"):
            await queue.add("x")
        await queue.close()
    finally:
        stop(owner)
    async with psyq.Queue("held", connection=db) as queue:  # free again once it died
        assert await queue.count() == 1


def acknowledged(proc: subprocess.Popen[str], count: int, prefix: str = "added") -> list[str]:
    """Read the child's acknowledgements until `count` of `prefix` are in, then kill -9."""
    assert proc.stdout is not None
    seen: list[str] = []
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while len(seen) < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(prefix + " "):
            seen.append(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rest = proc.stdout.read().split("\n")  # lines written before the kill
    seen += [line.split()[1] for line in rest if line.startswith(prefix + " ")]
    assert len(seen) >= count, f"child acknowledged too little: {lines[-5:]} {proc.stderr}"
    return seen


def stored_ids(path: Path, state: str | None = None) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        query = "SELECT id FROM jobs" + (" WHERE state = ?" if state else "")
        return {row[0] for row in conn.execute(query, (state,) if state else ())}
    finally:
        conn.close()


def test_kill_9_in_durable_mode_loses_no_acknowledged_add(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    proc = spawn("load", url(path, "durable"), "add")
    try:
        acked = acknowledged(proc, 300)
    finally:
        stop(proc)
    lost = set(acked) - stored_ids(path)
    print(f"durable adds: acknowledged {len(acked)}, lost {len(lost)}")
    assert lost == set()


def test_kill_9_in_durable_mode_loses_no_acknowledged_completion(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    proc = spawn("load", url(path, "durable"), "complete")
    try:
        acked = acknowledged(proc, 200, prefix="done")
    finally:
        stop(proc)
    lost = set(acked) - stored_ids(path, "completed")
    print(f"durable completions: acknowledged {len(acked)}, lost {len(lost)}")
    assert lost == set()


def test_kill_9_in_buffered_mode_loses_at_most_the_flush_window(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    proc = spawn("load", url(path, "buffered", flush_changes=100, flush_ms=10), "add")
    try:
        acked = acknowledged(proc, 2000)
    finally:
        stop(proc)
    lost = set(acked) - stored_ids(path)
    print(f"buffered adds: acknowledged {len(acked)}, lost {len(lost)} (window: 100 / 10 ms)")
    # A lost add is one of the newest: everything older than the last flush is on disk.
    newest = sorted(int(i) for i in acked)[-len(lost) :] if lost else []
    assert {str(i) for i in newest} == lost
    assert len(lost) <= 4 * 100 + 100  # BACKLOG_WINDOWS flushes, plus the one being written


def test_a_truncated_wal_tail_loads_its_prefix(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    proc = spawn("load", url(path, "durable"), "add")
    try:
        acked = acknowledged(proc, 200)
    finally:
        stop(proc)
    wal = Path(f"{path}-wal")
    assert wal.exists() and wal.stat().st_size > 0
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    data = wal.read_bytes()
    Path(f"{copy}-wal").write_bytes(data[: len(data) - 3000])
    ids = stored_ids(copy)
    assert ids and ids <= set(acked) | {str(max(int(i) for i in acked) + 1)}
    print(f"truncated WAL: {len(ids)} of {len(acked)} acknowledged jobs kept")


async def test_a_corrupted_file_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.write_bytes(b"this is not a database" * 100)
    queue = psyq.Queue("q", connection=url(path))
    with pytest.raises(psyq.PsyqError, match=r"cannot open .*jobs.db as a psyq database"):
        await queue.add("x")
    await queue.close()


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ("sqlite://", "names no file"),
        ("sqlite:///x.db?durability=sometimes", "durability"),
        ("sqlite:///x.db?flush_ms=0", "flush_ms"),
        ("sqlite:///x.db?bogus=1", "bogus"),
        ("sqlite://host/x.db", "sqlite:///"),
    ],
)
async def test_bad_urls(bad: str, named: str) -> None:
    with pytest.raises(psyq.InvalidURLError, match=named):
        await psyq.Queue("q", connection=bad).add("x")


async def test_the_durable_option_commits_before_add_returns(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with psyq.Queue("q", connection=url(path, flush_ms=60_000, flush_changes=10_000)) as q:
        job = await q.add("x", durable=True)
        assert job.id in stored_ids(path)
        lazy = await q.add("y")
        assert lazy.id not in stored_ids(path)  # buffered: still in the write buffer


async def test_a_durable_flow_is_committed_before_add_returns(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    connection = url(path, "durable", flush_ms=60_000, flush_changes=10_000)
    async with psyq.FlowProducer(connection=connection) as flows:
        tree = await flows.add(
            {"name": "parent", "queue_name": "q", "children": [{"name": "c", "queue_name": "q"}]}
        )
        assert {tree.job.id, tree.children[0].job.id} <= stored_ids(path)


async def test_a_bulk_add_counts_every_job_against_the_buffer(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    async with psyq.Queue("q", connection=url(path, flush_ms=60_000, flush_changes=100)) as q:
        jobs = await q.add_bulk([{"name": "x"} for _ in range(150)])
        # 150 job changes fill a 100-change window: they are written before add_bulk returns.
        assert {job.id for job in jobs} <= stored_ids(path)
