"""The live move (`psyq migrate --live`, `psyq.migrate_live`) with real servers: a producer
adds to A, then switches to B once the mover started; workers run on A and on B the whole
time; A also holds delayed and prioritized jobs, completed and failed ones, a flow and a
scheduler. Afterwards every job ran exactly once and is on B, and A is empty. Then the same
with the mover killed with SIGKILL mid-run and started again with its journal."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq_migrate import MigrateError
from psyq_migrate.journal import Journal, entry_page, job_payload
from psyq_migrate.live import LiveProgress
from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name
from tests.polling import eventually

PSYQ = str(Path(sys.executable).with_name("psyq"))
PREFILL = 400  # jobs on A before the mover starts
PRODUCE_SECONDS = 1.5  # on each side
QUIET = 2.0
KILL_AFTER = 0.05  # seconds after the first progress line
FIRST = 10  # jobs A's workers finish before the mover starts
DONE = frozenset({"completed", "failed"})

LIVE_PAIRS = {
    "psyq->redis": ("psyq", "redis"),
    "redis->postgres": ("redis", "postgres"),
    "postgres->psyq": ("postgres", "psyq"),
    # the test's process owns the file; the mover reaches it through the owner (share=on)
    "sqlite->redis": ("sqlite", "redis"),
}


@dataclass
class World:
    """What the test's producers and workers saw: every run of every job."""

    queue: str
    a: str
    b: str
    ran: Counter[str] = field(default_factory=Counter)  # job key -> runs
    added: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (side, job id)
    switched: asyncio.Event = field(default_factory=asyncio.Event)
    figures: dict[str, float] = field(default_factory=dict)

    def processor(self, side: str) -> Callable[[psyq.Job], Awaitable[Any]]:
        async def process(job: psyq.Job) -> Any:
            key = str(job.data["n"]) if "n" in (job.data or {}) else job.id
            self.ran[key] += 1
            await job.log(f"ran on {side}")
            await job.update_progress(50)
            if (job.data or {}).get("fail"):
                raise psyq.UnrecoverableError("planned failure")
            await asyncio.sleep(0.002)  # sleep: the job's work
            return {"n": key, "side": side}

        return process


async def prefill(world: World) -> None:
    """Plain, delayed, prioritized and failing jobs, a flow and a scheduler on A."""
    async with psyq.Queue(world.queue, connection=world.a) as queue:
        jobs = []
        for n in range(PREFILL):
            opts: dict[str, Any] = {}
            if n % 10 == 3:
                opts["delay"] = 1500 + 7 * n
            elif n % 10 == 7:
                opts["priority"] = 1 + n % 4
            data: dict[str, Any] = {"n": n, "fail": n % 50 == 11}
            jobs.append({"name": "pre", "data": data, "opts": opts})
        for job in await queue.add_bulk(jobs):
            world.added[str(job.data["n"])] = ("A", job.id)
        await queue.upsert_job_scheduler("tick", {"every": 700}, {"name": "tick", "data": {}})
    async with psyq.FlowProducer(connection=world.a) as flows:
        node = await flows.add(
            {
                "name": "parent",
                "queue_name": world.queue,
                "data": {"n": "parent"},
                "children": [
                    {"name": "child", "queue_name": world.queue, "data": {"n": f"child-{i}"}}
                    for i in range(3)
                ],
            }
        )
    world.added["parent"] = ("A", node.job.id)
    for child in node.children:
        world.added[str(child.job.data["n"])] = ("A", child.job.id)


async def produce(world: World) -> None:
    """Adds to A until the mover has started and PRODUCE_SECONDS passed, then to B for as
    long: a producer restarted onto B."""
    n = 0
    async with (
        psyq.Queue(world.queue, connection=world.a) as on_a,
        psyq.Queue(world.queue, connection=world.b) as on_b,
    ):
        started = time.monotonic()
        side, queue = "A", on_a
        mid_move = False
        while True:
            elapsed = time.monotonic() - started
            if side == "A" and world.switched.is_set() and not mid_move:
                mid_move = True  # A is paused now: these wait there and move
                await add_mid_move(world, on_a)
            if side == "A" and world.switched.is_set() and elapsed >= PRODUCE_SECONDS:
                side, queue, started = "B", on_b, time.monotonic()
                await add_deduplicated_on_b(world, on_b)
                continue
            if side == "B" and elapsed >= PRODUCE_SECONDS:
                return
            opts: dict[str, Any] = (
                {"delay": 400} if n % 9 == 4 else {"priority": 3} if n % 9 == 5 else {}
            )
            job = await queue.add("live", {"n": f"p{n}"}, **opts)
            world.added[f"p{n}"] = (side, job.id)
            n += 1
            await asyncio.sleep(0.005)  # sleep: the producer's pace between two adds


async def add_mid_move(world: World, on_a: psyq.Queue) -> None:
    """While the move runs: a flow, a deduplicated delayed job and a scheduler added to A."""
    await on_a.upsert_job_scheduler("tock", {"every": 900}, {"name": "tock", "data": {}})
    job = await on_a.add("live", {"n": "dedup"}, deduplication={"id": "once"}, delay=2500)
    world.added["dedup"] = ("A", job.id)
    async with psyq.FlowProducer(connection=world.a) as flows:
        node = await flows.add(
            {
                "name": "parent",
                "queue_name": world.queue,
                "data": {"n": "flow2"},
                "children": [
                    {"name": "child", "queue_name": world.queue, "data": {"n": f"flow2-{i}"}}
                    for i in range(2)
                ],
            }
        )
    world.added["flow2"] = ("A", node.job.id)
    for child in node.children:
        world.added[str(child.job.data["n"])] = ("A", child.job.id)


async def add_deduplicated_on_b(world: World, on_b: psyq.Queue) -> None:
    """Once the deduplicated job reached B (its key goes first), an add of the same
    deduplication id on B is deduplicated against it."""
    job_id = world.added["dedup"][1]

    async def arrived() -> bool:
        return await on_b.get_job(job_id) is not None

    await eventually(arrived, "the deduplicated job reaching B", 20, interval=0.05)
    again = await on_b.add("live", {"n": "dedup"}, deduplication={"id": "once"})
    assert again.id == job_id, "B took a deduplicated add"


async def run_scenario(world: World, mover: Callable[[World], Awaitable[None]]) -> None:
    await prefill(world)
    workers = [
        psyq.Worker(world.queue, world.processor(side), connection=url, concurrency=4)
        for side, url in (("A", world.a), ("A", world.a), ("B", world.b))
    ]
    try:
        producing = asyncio.ensure_future(produce(world))
        await finished_on_a(world, FIRST)  # A's workers take and finish some jobs first
        await mover(world)
        await producing
        await drain_b(world)
    finally:
        for worker in workers:
            await asyncio.wait_for(worker.close(force=True), 20)
    await check(world)


async def finished_on_a(world: World, count: int) -> None:
    """Until A's workers have finished `count` jobs (completed or failed) on A."""
    async with psyq.Queue(world.queue, connection=world.a) as on_a:

        async def finished() -> bool:
            return sum((await on_a.get_job_counts(*DONE)).values()) >= count

        await eventually(finished, f"{count} jobs finished on A", 30, interval=0.02)


async def drain_b(world: World, timeout: float = 60) -> None:
    """Stop the scheduler (now on B) and wait for B to finish every job."""
    async with psyq.Queue(world.queue, connection=world.b) as queue:
        assert await queue.remove_job_scheduler("tick")
        assert await queue.remove_job_scheduler("tock")  # upserted on A mid-move
        counts: dict[str, int] = {}

        async def finished() -> bool:
            nonlocal counts
            counts = await queue.get_job_counts()
            return sum(v for k, v in counts.items() if k not in DONE) == 0

        try:
            await eventually(finished, "B finishing every job", timeout, interval=0.1)
        except AssertionError as late:
            raise AssertionError(f"{late}; counts on B: {counts}") from None


async def check(world: World) -> None:
    async with psyq.Queue(world.queue, connection=world.a) as on_a:
        assert sum((await on_a.get_job_counts()).values()) == 0
    twice = {key: runs for key, runs in world.ran.items() if runs != 1}
    assert not twice, f"ran more than once: {twice}"
    missing = set(world.added) - set(world.ran)
    assert not missing, f"never ran: {sorted(missing)[:10]}"
    ticks = [key for key in world.ran if key not in world.added]
    assert ticks, "the scheduler made no run"
    async with psyq.Queue(world.queue, connection=world.b) as on_b:
        for key, (side, job_id) in world.added.items():
            job = await on_b.get_job(job_id)
            assert job is not None, f"job {key} ({job_id}, added on {side}) is not on B"
            assert str(job.data["n"]) == key
            state = await job.get_state()
            if job.data.get("fail"):
                assert state == "failed", (key, state)
                continue
            assert state == "completed", (key, state)
            assert job.returnvalue["n"] == key
            assert job.progress == 50
            logs = (await on_b.get_job_logs(job_id))["logs"]
            assert logs and logs[0].startswith("ran on"), (key, logs)
        for tick in ticks:
            assert await on_b.get_job(tick) is not None, f"scheduler run {tick} is not on B"
        parent = await on_b.get_job(world.added["parent"][1])
        assert parent is not None
        assert len(await parent.get_children_values()) == 3
        parent = await on_b.get_job(world.added["flow2"][1])
        assert parent is not None
        assert len(await parent.get_children_values()) == 2


def on_progress(world: World, lines: list[LiveProgress]) -> Callable[[LiveProgress], None]:
    def seen(step: LiveProgress) -> None:
        lines.append(step)
        world.switched.set()

    return seen


def record_figures(world: World, lines: list[LiveProgress]) -> None:
    last = lines[-1]
    world.figures.update(moved=last.moved, seconds=last.seconds, rate=last.rate)
    print(f"\nlive move {world.a.split(':')[0]} -> {world.b.split(':')[0]}: {world.figures}")


# ---------------------------------------------------------------------- the command line
async def run_cli(world: World, journal: Path, kill_after_moved: int | None = None) -> None:
    """`psyq migrate --live` as a process; with `kill_after_moved`, SIGKILLed once its
    progress line shows that many jobs moved, then started again."""
    argv = [PSYQ, "migrate", "--from", world.a, "--to", world.b, "--live"]
    argv += ["--queues", world.queue, "--quiet-for", str(QUIET), "--journal", str(journal)]
    if kill_after_moved is not None:
        process = await asyncio.create_subprocess_exec(
            *argv,
            "--batch-size",
            "10",
            stderr=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
        )
        await read_progress(process, kill_after_moved, world)
        await asyncio.sleep(KILL_AFTER)  # sleep: the kill lands amid the batches that follow
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL
        with closing(sqlite3.connect(journal)) as book:
            cut = book.execute("SELECT count(*) FROM moves WHERE status = 'pending'").fetchone()
        print(f"\nkilled with {cut[0]} moves under way in the journal")
    process = await asyncio.create_subprocess_exec(
        *argv, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    lines = await read_progress(process, None, world)
    out, _ = await process.communicate()
    assert await process.wait() == 0, lines[-5:]
    assert lines[-1].startswith("done: ")
    assert "moved" in out.decode()
    found = re.search(r"moved (\d+).* ([\d,]+) jobs/s, (\d+) s", lines[-1])
    assert found is not None
    world.figures.update(moved=int(found.group(1)), rate=float(found.group(2).replace(",", "")))
    print(f"\nlive move: {lines[-1]}")


async def read_progress(
    process: asyncio.subprocess.Process, moved: int | None, world: World | None = None
) -> list[str]:
    """stderr lines until `moved` jobs are reported moved (None: until the process ends);
    the first line lets the producer switch to B."""
    assert process.stderr is not None
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(process.stderr.readline(), 120)
        if not raw:
            assert moved is None, f"the mover ended: {lines[-5:]}"
            return lines
        line = raw.decode().strip()
        if os.environ.get("PSYQ_TEST_LIVE_ECHO"):
            print(line, flush=True)
        lines.append(line)
        if world is not None and line.startswith("moved "):
            world.switched.set()
        found = re.match(r"moved (\d+)", line)
        if moved is not None and found and int(found.group(1)) >= moved:
            return lines


def live_world(request: pytest.FixtureRequest, pair: str) -> World:
    source, destination = LIVE_PAIRS[pair]
    return World(fresh_name("live"), BACKENDS[source](request), BACKENDS[destination](request))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("pair", sorted(LIVE_PAIRS))
async def test_a_live_move_runs_every_job_once_and_leaves_a_empty(
    request: pytest.FixtureRequest, tmp_path: Path, pair: str
) -> None:
    world = live_world(request, pair)
    await run_scenario(world, lambda w: run_cli(w, tmp_path / "live.journal"))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("pair", sorted(LIVE_PAIRS))
async def test_a_mover_killed_mid_way_finishes_when_started_again(
    request: pytest.FixtureRequest, tmp_path: Path, pair: str
) -> None:
    world = live_world(request, pair)
    await run_scenario(world, lambda w: run_cli(w, tmp_path / "live.journal", 10))


# ---------------------------------------------------------------------- in the app's process
async def test_a_sqlite_file_moves_through_the_api_in_its_own_process(tmp_path: Path) -> None:
    world = World(fresh_name("live"), f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db")
    lines: list[LiveProgress] = []

    async def mover(w: World) -> None:
        result = await psyq.migrate_live(
            w.a, w.b, [w.queue], QUIET, str(tmp_path / "j.journal"), on_progress(w, lines)
        )
        assert result.moved > 0 and result.schedulers == 2 and result.conflicts == 0
        assert result.floors[w.queue] >= 1_000_000

    await run_scenario(world, mover)
    assert lines[-1].done and lines[-1].left == 0
    record_figures(world, lines)


async def test_bad_input_is_refused_naming_the_value_and_writes_nothing(tmp_path: Path) -> None:
    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    async with psyq.Queue("real", connection=a) as queue:
        await queue.add("x", {})
    journal = tmp_path / "j.journal"
    with pytest.raises(MigrateError, match="same backend"):
        await psyq.migrate_live(a, a, journal=str(journal))
    with pytest.raises(MigrateError, match="'nope'"):
        await psyq.migrate_live(a, b, ["nope"], journal=str(journal))
    with pytest.raises(
        MigrateError, match=r"cannot (open|reach) the destination 'redis://127\.0\.0\.1:1/0'"
    ):
        await psyq.migrate_live(a, "redis://127.0.0.1:1/0", journal=str(journal))
    with pytest.raises(MigrateError, match="no such SQLite file"):
        await psyq.migrate_live(f"sqlite:///{tmp_path}/none.db", b, journal=str(journal))
    assert not journal.exists()
    assert not (tmp_path / "b.db").exists()
    assert not (tmp_path / "none.db").exists()


async def cut_move(
    a: str, b: str, path: Path, queue: str, removed: set[int], imported: bool
) -> None:
    """A batch of four jobs journaled as the mover does (A paused first), then cut: the
    jobs `removed` taken off A, and with `imported` those imported into B, unmarked."""
    async with psyq.Queue(queue, connection=a) as on_a:
        await on_a.add_bulk([{"name": "n", "data": {"n": n}} for n in range(4)])
    source, destination = await open_backend(a), await open_backend(b)
    try:
        page = await source.export_jobs(queue, None, 10)
        payloads = [job_payload(page, job) for job in page.jobs]
        book = Journal(str(path), a, b)
        book.set_setting(f"paused_before:{queue}", "false")
        await source.pause(queue)
        book.write(queue, "job", [(p["job"]["id"], p) for p in payloads])
        book.close()
        for n in sorted(removed):
            assert await source.remove_job(queue, page.jobs[n].id, remove_children=False)
        if imported:
            await destination.import_jobs(queue, entry_page([payloads[n] for n in removed]))
    finally:
        await release_backend(destination)
        await release_backend(source)


async def test_a_rerun_settles_each_point_a_run_can_be_killed_at(tmp_path: Path) -> None:
    """A batch cut where kill -9 can cut it: journaled, some jobs removed from A, none in B
    yet; or journaled, removed and imported, not marked done. The next run leaves exactly
    one copy of each job, on B, in their order."""
    a, b, path = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db", tmp_path / "j"
    await cut_move(a, b, path, "removed", {1, 3}, imported=False)
    await cut_move(a, b, path, "imported", {0, 1, 2, 3}, imported=True)
    result = await psyq.migrate_live(a, b, ["removed", "imported"], 0.2, str(path))
    assert result.conflicts == 0
    for queue in ("removed", "imported"):
        async with (
            psyq.Queue(queue, connection=a) as on_a,
            psyq.Queue(queue, connection=b) as on_b,
        ):
            assert sum((await on_a.get_job_counts()).values()) == 0
            assert (await on_b.get_job_counts())["waiting"] == 4
            waiting = await on_b.get_jobs(["waiting"], 0, -1, asc=True)
            assert [job.data["n"] for job in waiting] == [0, 1, 2, 3], queue


def test_the_command_line_refuses_bad_input_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from psyq.cli.main import main

    a = f"sqlite:///{tmp_path}/a.db"
    assert main(["migrate", "--from", a, "--to", a, "--live"]) == 2
    assert "same backend" in capsys.readouterr().err
    assert main(["migrate", "--from", a, "--to", f"{a}x", "--live", "--dry-run"]) == 2
    assert "--dry-run is an option of the Spark migration" in capsys.readouterr().err
    assert main(["migrate", "--from", a, "--to", f"{a}x", "--live", "--quiet-for", "-1"]) == 2
    assert "--quiet-for must be 0 or more seconds, got -1" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


async def test_a_queue_paused_before_the_move_stays_paused_on_both_sides_in_order(
    tmp_path: Path,
) -> None:
    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    async with psyq.Queue("held", connection=a) as queue:
        await queue.add_bulk([{"name": "n", "data": {"n": n}} for n in range(5)])
        await queue.pause()
    result = await psyq.migrate_live(a, b, ["held"], 0.2, str(tmp_path / "j"))
    assert result.moved == 5
    async with (
        psyq.Queue("held", connection=a) as on_a,
        psyq.Queue("held", connection=b) as on_b,
    ):
        assert await on_a.is_paused() and await on_b.is_paused()
        waiting = await on_b.get_jobs(["paused"], 0, -1, asc=True)  # waiting, paused
        assert [job.data["n"] for job in waiting] == [0, 1, 2, 3, 4]  # in their order


@pytest.mark.parametrize("destination", ["sqlite", "postgres"])
async def test_a_job_b_holds_differently_is_refused_kept_and_counted(
    request: pytest.FixtureRequest, tmp_path: Path, destination: str
) -> None:
    a = f"sqlite:///{tmp_path}/a.db"
    b = f"sqlite:///{tmp_path}/b.db" if destination == "sqlite" else BACKENDS["postgres"](request)
    queue = fresh_name("clash")
    async with psyq.Queue(queue, connection=b) as on_b:
        await on_b.add("theirs", {"side": "B"}, job_id="same")
    async with psyq.Queue(queue, connection=a) as on_a:
        await on_a.add("ours", {"side": "A"}, job_id="same")
        await on_a.add("other", {"side": "A"})
    result = await psyq.migrate_live(a, b, [queue], 0.2, str(tmp_path / "j"))
    assert (result.moved, result.conflicts) == (1, 1)
    with closing(sqlite3.connect(tmp_path / "j")) as book:
        kept = book.execute("SELECT item FROM moves WHERE status = 'conflict'").fetchall()
    assert kept == [("same",)]  # the only copy of A's job: in the journal, reported
    async with psyq.Queue(queue, connection=b) as on_b:
        job = await on_b.get_job("same")
        assert job is not None and job.data == {"side": "B"}
