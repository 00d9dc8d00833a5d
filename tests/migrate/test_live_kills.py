"""A live move cut by kills, with a worker on B that runs each job as it arrives and removes
it (`removeOnComplete`): every job runs exactly once, none is lost.

- A buffered `sqlite:///` file whose owner (the app: this test's process) restarts
  gracefully during the move: the mover, its peer, takes the file over (the app comes back
  as its peer), and is then killed with kill -9 as the file's owner, its last removals from
  A acknowledged and not yet committed; the app takes the file back. The removals must be
  committed before anything relies on them.
- A durable file, the mover killed with kill -9 again and again: a kill may land after B's
  import of a batch and before the journal's mark of it; B's worker then runs and removes
  the batch before the rerun, which must know the batch arrived (its receipt on B).
- The app that owns a buffered file killed with kill -9 mid-move, the mover its peer: the
  removals the app acknowledged to the mover and had not committed come back with the
  crash; the mover must not have relied on them.
- The same cut placed exactly, in this process: B's import returns, the mover stops there.

`PSYQ_SOAK_SCALE` (tests/soak.py) multiplies the jobs and the kills (`make soak-stores`).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import psyq
from psyq.backends import open_backend, release_backend
from psyq.backends.base import BackendAdapter, ExportPage
from psyq_migrate.journal import Journal
from psyq_migrate.live import LiveMove
from tests.conformance.conftest import BACKENDS
from tests.conftest import fresh_name
from tests.polling import Deadline, eventually
from tests.soak import report, scaled

PSYQ = str(Path(sys.executable).with_name("psyq"))
BATCH = 5  # jobs per step of the mover: many steps, many places for a kill to land


@dataclass
class Runs:
    """Every run of every job on B, by the job's number."""

    ran: Counter[int] = field(default_factory=Counter)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def total(self) -> int:
        return sum(self.ran.values())

    async def process(self, job: psyq.Job) -> None:
        self.ran[int(job.data["n"])] += 1
        self.changed.set()

    async def wait_until(self, done: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {what}: {self.total} runs"
            self.changed.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))

    def outcome(self, jobs: int) -> tuple[int, int]:
        """(lost, ran twice)"""
        lost = sum(1 for n in range(jobs) if self.ran[n] == 0)
        return lost, sum(1 for runs in self.ran.values() if runs > 1)


async def fill_a(url: str, queue: str, jobs: int) -> psyq.Queue:
    """The app's queue on A, open (this process owns the file), holding `jobs` jobs that B's
    worker removes once it ran them."""
    app = psyq.Queue(queue, connection=url)
    for start in range(0, jobs, 500):
        batch = range(start, min(jobs, start + 500))
        await app.add_bulk(
            [{"name": "j", "data": {"n": n}, "opts": {"remove_on_complete": True}} for n in batch]
        )
    return app


async def open_app(url: str, queue: str) -> psyq.Queue:
    """The app starting again: its first call owns the file (the mover is dead) or reaches
    its owner."""
    app = psyq.Queue(queue, connection=url)
    await app.get_job_counts()
    return app


async def start_mover(a: str, b: str, queue: str, journal: Path) -> asyncio.subprocess.Process:
    argv = [PSYQ, "migrate", "--from", a, "--to", b, "--live", "--queues", queue]
    argv += ["--quiet-for", "1", "--journal", str(journal), "--batch-size", str(BATCH)]
    return await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )


def moved(journal: Path) -> int:
    """Entries the journal marks done (read beside the mover, as WAL readers do)."""
    if not journal.exists():
        return 0
    with closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as book:
        try:
            return int(
                book.execute("SELECT count(*) FROM moves WHERE status = 'done'").fetchone()[0]
            )
        except sqlite3.OperationalError:  # its tables are not there yet
            return 0


async def wait_moved(journal: Path, more: int, mover: asyncio.subprocess.Process) -> bool:
    """Until the mover marked `more` entries done from now; False when it ended first (exit
    0: it moved every job; a loaded machine lets it run ahead of the kills)."""
    target = moved(journal) + more

    def moved_or_ended() -> str:
        if moved(journal) >= target:
            return "moved"
        if mover.returncode is not None:
            assert mover.returncode == 0, f"the mover failed ({mover.returncode})"
            return "ended"
        return ""

    what = f"the mover moving {more} jobs"
    return await eventually(moved_or_ended, what, 60, interval=0.005) == "moved"


async def wait_owner(path: Path, mover: asyncio.subprocess.Process) -> None:
    """Until the mover owns the file (its `.owner` note names it)."""
    note = Path(f"{path}.owner")

    def owned() -> bool:
        if note.exists() and note.read_text().startswith(f"pid {mover.pid} "):
            return True
        assert mover.returncode is None, f"the mover ended ({mover.returncode})"
        return False

    await eventually(owned, "the mover taking the file over", 30, interval=0.005)


async def kill(mover: asyncio.subprocess.Process) -> None:
    if mover.returncode is None:
        mover.send_signal(signal.SIGKILL)
    await mover.wait()


@dataclass
class Cuts:
    """What the kills left in the journal."""

    kills: int = 0
    under_way: int = 0  # entries not marked, over all kills
    imported: int = 0  # kills that landed after B's import of a batch, before its mark
    settled: int = 0  # entries those kills left, which B's receipts settled

    async def note(self, journal: Path, b: BackendAdapter, queue: str) -> None:
        """After a kill: the entries under way, and those B holds a receipt for."""
        with closing(sqlite3.connect(journal)) as book:
            token = book.execute("SELECT value FROM settings WHERE key = 'token'").fetchone()
            rows = book.execute("SELECT seq FROM moves WHERE status = 'pending'").fetchall()
        pending = [row[0] for row in rows] if token is not None else []
        self.kills += 1
        self.under_way += len(pending)
        arrived = 0
        for seq in pending:
            receipt = await b.get_job(queue, f"psyq-live-receipt-{token[0]}-{seq}")
            arrived += len(receipt_entries(receipt.data)) if receipt is not None else 0
        self.imported += arrived > 0
        self.settled += arrived


def receipt_entries(data: Any) -> list[int]:
    return list((json.loads(data) if isinstance(data, str) else data)["seqs"])


async def drain_b(b: str, queue: str, mover: asyncio.subprocess.Process) -> str:
    """The last mover's end (exit 0) and B's last job: its final progress line."""
    _, err = await asyncio.wait_for(mover.communicate(), 120)
    lines = err.decode().strip().splitlines()
    assert mover.returncode == 0, lines[-5:]
    await wait_b_empty(b, queue)
    return lines[-1]


async def wait_b_empty(b: str, queue: str) -> None:
    """Until B holds no job of the queue to run (its worker ran them all and removed them;
    a receipt, a finished job, may be there still)."""
    async with psyq.Queue(queue, connection=b) as on_b:
        counts: dict[str, int] = {}

        async def empty() -> bool:
            nonlocal counts
            counts = await on_b.get_job_counts()
            return sum(v for k, v in counts.items() if k not in ("completed", "failed")) == 0

        try:
            await eventually(empty, "B running every job", 30, interval=0.05)
        except AssertionError as late:
            raise AssertionError(f"{late}; counts on B: {counts}") from None


SOURCES = {
    # the app restarts gracefully during the move: the mover takes the file over
    "buffered file handed over": ("sqlite:///{}/a.db?flush_ms=500", True),
    "durable file": ("sqlite:///{}/a.db?durability=durable", False),
}


@pytest.mark.timeout(scaled(150))
@pytest.mark.parametrize("source", sorted(SOURCES))
async def test_a_mover_killed_again_and_again_runs_every_job_once(
    request: pytest.FixtureRequest, tmp_path: Path, source: str
) -> None:
    pattern, handover = SOURCES[source]
    a, b = pattern.format(tmp_path), BACKENDS["redis"](request)
    queue, journal = fresh_name("kills"), tmp_path / "live.journal"
    jobs, kills = scaled(1000), scaled(4)
    step = jobs // (4 * kills + 4)  # jobs moved from a mover's start to its kill (each half)
    started = time.monotonic()
    runs, cuts = Runs(), Cuts()
    app = await fill_a(a, queue, jobs)
    worker = psyq.Worker(queue, runs.process, connection=b, concurrency=8)
    destination = await open_backend(b)
    try:
        for _ in range(kills):
            mover = await start_mover(a, b, queue, journal)
            going = await wait_moved(journal, step, mover)
            if going and handover:  # the app restarts gracefully: the mover takes the file
                await app.close()
                await wait_owner(tmp_path / "a.db", mover)
                app = await open_app(a, queue)  # back, as the mover's peer
                going = await wait_moved(journal, step, mover)  # the mover as the owner
            if not going:
                break
            await kill(mover)
            await app.get_job_counts()  # the app's next call takes the file over again
            await cuts.note(journal, destination, queue)
        last = await drain_b(b, queue, await start_mover(a, b, queue, journal))
        await runs.wait_until(lambda: runs.outcome(jobs)[0] == 0, "every job's run", 30)
    finally:
        await asyncio.wait_for(worker.close(), 20)
        await release_backend(destination)
        await app.close()
    lost, twice = runs.outcome(jobs)
    report(
        f"live move, {source}",
        time.monotonic() - started,
        jobs=jobs,
        kills=cuts.kills,
        entries_under_way=cuts.under_way,
        kills_between_import_and_mark=cuts.imported,
        entries_settled_by_receipts=cuts.settled,
        lost=lost,
        ran_twice=twice,
    )
    print(f"last mover: {last}")
    assert (lost, twice) == (0, 0)
    assert cuts.kills >= 1, "the mover moved every job before its first kill"
    async with psyq.Queue(queue, connection=a) as on_a:
        assert sum((await on_a.get_job_counts()).values()) == 0
    async with psyq.Queue(queue, connection=b) as on_b:  # no receipt left behind either
        assert sum((await on_b.get_job_counts()).values()) == 0


class Cut(BaseException):
    """The mover stops here, as kill -9 would stop it: nothing after runs."""


def cut_after_import(backend: BackendAdapter, imports: int) -> None:
    """Stop the mover right after B's `imports`-th import returned."""
    real = backend.import_jobs
    done = 0

    async def import_then_stop(queue: str, page: ExportPage, overwrite: bool = False) -> int:
        nonlocal done
        written = await real(queue, page, overwrite)
        done += 1
        if done == imports:
            raise Cut
        return written

    backend.import_jobs = import_then_stop  # type: ignore[method-assign]


async def test_a_batch_b_ran_and_removed_before_its_mark_is_not_imported_again(
    tmp_path: Path,
) -> None:
    """Cut between B's import of the second batch and its mark; B's worker runs and removes
    all it holds; the rerun moves the rest and imports nothing twice."""
    a = f"sqlite:///{tmp_path}/a.db?durability=durable"
    b = f"sqlite:///{tmp_path}/b.db?durability=durable"
    queue, journal, jobs = fresh_name("cut"), str(tmp_path / "j"), 4 * BATCH
    app = await fill_a(a, queue, jobs)
    await app.close()
    source, destination = await open_backend(a), await open_backend(b)
    try:
        cut_after_import(destination, 2)
        book = Journal(journal, a, b)
        try:
            with pytest.raises(Cut):
                await LiveMove(source, destination, book, [queue], BATCH, None).run(0.2)
        finally:
            book.close()
    finally:
        await release_backend(destination)
        await release_backend(source)
    runs = Runs()
    async with psyq.Worker(queue, runs.process, connection=b, concurrency=4):
        await runs.wait_until(lambda: runs.total >= 2 * BATCH, "B's run of both batches")
        await wait_b_empty(b, queue)  # B's worker removed them: neither A nor B holds them
        await psyq.migrate_live(a, b, [queue], 0.2, journal)
        await runs.wait_until(lambda: runs.outcome(jobs)[0] == 0, "every job's run")
    assert runs.outcome(jobs) == (0, 0), runs.ran


def rows_in_file(path: Path) -> int:
    """The job rows another reader of the file sees: what a crash would keep."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM jobs").fetchone()[0])


async def test_wait_committed_writes_a_buffered_files_changes(tmp_path: Path) -> None:
    """What the mover relies on: after `wait_committed`, a buffered file's changes are in
    the file, long before its flush window would write them."""
    url = f"sqlite:///{tmp_path}/a.db?flush_ms=600000&flush_changes=100000"
    backend = await open_backend(url)
    try:
        async with psyq.Queue("q", connection=url) as queue:
            await queue.add_bulk([{"name": "j", "data": {"n": n}} for n in range(3)])
            assert rows_in_file(tmp_path / "a.db") == 0  # buffered: not written yet
            await backend.wait_committed()
            assert rows_in_file(tmp_path / "a.db") == 3
            assert await queue.remove("1")
            await backend.wait_committed()
            assert rows_in_file(tmp_path / "a.db") == 2
    finally:
        await release_backend(backend)


async def start_app(url: str, queue: str, jobs: int) -> asyncio.subprocess.Process:
    """tests/migrate/live_app.py, once it reached the file."""
    app = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.migrate.live_app", url, queue, str(jobs),
        stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert app.stdout is not None
    line = await asyncio.wait_for(app.stdout.readline(), 60)
    assert line == b"ready\n", line
    return app


async def stopped(mover: asyncio.subprocess.Process) -> int:
    """The mover's end after its file's owner died: an error (exit 2) when a call of its
    failed, else it went on as the file's new owner and is killed too."""
    try:
        return await asyncio.wait_for(mover.wait(), 15)
    except TimeoutError:
        await kill(mover)
        return -signal.SIGKILL


@pytest.mark.timeout(scaled(150))
async def test_the_apps_file_owner_killed_mid_move_runs_every_job_once(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    a, b = f"sqlite:///{tmp_path}/a.db?flush_ms=500", BACKENDS["redis"](request)
    queue, journal = fresh_name("owner-kills"), tmp_path / "live.journal"
    jobs, kills = scaled(1000), scaled(3)
    step = jobs // (2 * kills + 2)
    started = time.monotonic()
    runs, cuts, ends = Runs(), Cuts(), Counter[int]()
    app = await start_app(a, queue, jobs)
    worker = psyq.Worker(queue, runs.process, connection=b, concurrency=8)
    destination = await open_backend(b)
    try:
        for _ in range(kills):
            mover = await start_mover(a, b, queue, journal)
            if not await wait_moved(journal, step, mover):
                break
            await kill(app)  # the file's owner crashes under the mover's calls
            ends[await stopped(mover)] += 1
            await cuts.note(journal, destination, queue)
            app = await start_app(a, queue, 0)  # the app restarts
        last = await drain_b(b, queue, await start_mover(a, b, queue, journal))
        await runs.wait_until(lambda: runs.outcome(jobs)[0] == 0, "every job's run", 30)
    finally:
        await asyncio.wait_for(worker.close(), 20)
        await release_backend(destination)
        await kill(app)
    lost, twice = runs.outcome(jobs)
    report(
        "live move, the app owning the buffered file killed",
        time.monotonic() - started,
        jobs=jobs,
        kills=cuts.kills,
        mover_ends=dict(ends),
        entries_under_way=cuts.under_way,
        lost=lost,
        ran_twice=twice,
    )
    print(f"last mover: {last}")
    assert (lost, twice) == (0, 0)
    assert cuts.kills >= 1, "the mover moved every job before the first kill"


async def test_a_peers_wait_committed_fails_once_the_owner_died_with_its_changes(
    tmp_path: Path,
) -> None:
    """A change the file's owner answered and had not committed dies with it; the peer that
    takes the file over cannot commit it, so its `wait_committed` says so instead of
    returning (the mover then stops, and its rerun settles the journal)."""
    url = f"sqlite:///{tmp_path}/a.db?flush_ms=600000&flush_changes=100000"
    app = await start_app(url, "q", 3)
    peer = await open_backend(url)
    try:
        assert await peer.remove_job("q", "1", remove_children=False)  # answered, buffered
        await kill(app)
        deadline = Deadline("the peer taking the file over", 30)
        while True:  # the call in flight when the owner died fails; the next takes over
            try:
                job = await peer.get_job("q", "1")
                break
            except psyq.ConnectionError as exc:
                if deadline.passed():
                    deadline.fail(exc)
        assert job is not None  # the removal died with the owner
        with pytest.raises(psyq.ConnectionError, match="whether they were committed"):
            await peer.wait_committed()
        await peer.wait_committed()  # nothing ended since
    finally:
        await release_backend(peer)
        await kill(app)
