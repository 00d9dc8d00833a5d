"""`migrate_live`: move queues from a store A to a store B while producers and workers keep
running on both sides (`psyq migrate --live`, and `psyq.migrate_live` in an app's process
for a store only that process reaches: a sqlite:/// file, memory://).

The steps (docs/migrate.md, "Live move"):

1. Each queue is paused on A (unless it already was): A's workers take nothing more, the
   jobs they hold finish there as usual (settling is not refused while paused), and a job
   added to A waits there. A job is then either taken by an A worker before the pause or
   moved, never both. The first read waits `PAUSE_GRACE` for takes already in flight.
2. Before anything is written to B, B's id counter of every queue is raised to A's plus a
   headroom (`headroom`), so ids A still hands out never reach those B hands out.
3. Schedulers move: journaled, removed from A (with their pending run), upserted on B.
4. Passes over A, in line order: each job that is not active (and no member of a flow with
   an active member) is written to the journal (committed), removed from A (`remove_job`,
   refused for a job a worker holds; then A commits the removals, `wait_committed`),
   imported into B with a receipt (idempotent by id; B commits it), and marked done.
   Flows move as a unit, parent before children (a child that runs on B finds its parent).
   Nothing is marked, or imported, before the store it relies on committed it: a crash of
   A's process (buffered SQLite, a psyq server) cannot bring back a job marked moved.
5. It ends once A holds no job of the queues and nothing moved for `quiet_for` seconds.
   The queues stay paused on A: a job a late producer adds there waits for the next move.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psyq.backends import open_backend, release_backend
from psyq.backends.base import BackendAdapter, ExportPage, JobRecord, NewJob
from psyq.errors import PsyqError, redact_url
from psyq_migrate.endpoints import check_source, scheme, sqlite_path
from psyq_migrate.errors import MigrateError
from psyq_migrate.journal import (
    CONFLICT,
    DONE,
    KEPT,
    Entry,
    Journal,
    default_journal_path,
    entry_page,
    job_payload,
    receipt_record,
    receipt_seqs,
)
from psyq_migrate.live_flows import FlowMember, movable_trees

__all__ = ["LiveProgress", "LiveResult", "headroom", "migrate_live"]

# The id headroom: a day of A's adds at the pace measured when the move starts, and never
# less than a million ids. Ids cost nothing (a gap is only a gap), so the headroom is made
# wide: A keeps handing out ids while producers switch, and each of them must stay below B's
# raised counter until the last producer left A.
HEADROOM_FLOOR = 1_000_000
HEADROOM_SECONDS = 86_400
RATE_SAMPLE = 1.0  # seconds A's counter is watched to measure its adds per second
# Seconds after pausing a queue on A before its jobs are read: a take that started before
# the pause (a Postgres transaction that read the flag first) commits within it. The first
# run spends them measuring A's pace (RATE_SAMPLE, no shorter).
PAUSE_GRACE = 1.0
PASS_IDLE = 0.2  # seconds between passes that moved nothing
REPORT_EVERY = 1.0
BATCH = 500
FINISHED = ("completed", "failed")
STATES = (
    "waiting", "prioritized", "delayed", "active", "waiting-children", "completed", "failed",
)  # fmt: skip
COUNTED = (*STATES, "paused")


@dataclass
class LiveProgress:
    """What the mover reports, at most once a second and once at the end."""

    moved: int  # jobs in B by this move (journaled and done, every run of it)
    left: int  # jobs of the queues still on A
    active: int  # of them, held by A's workers
    schedulers: int  # schedulers moved
    conflicts: int  # jobs B refused (a different job under the id), kept in the journal
    seconds: float  # since this run started
    rate: float  # jobs moved per second by this run, from its first move to its last
    done: bool = False


@dataclass
class LiveResult:
    queues: list[str]
    moved: int = 0  # by this run
    schedulers: int = 0
    conflicts: int = 0
    seconds: float = 0.0
    rate: float = 0.0  # as LiveProgress.rate
    floors: dict[str, int] = field(default_factory=dict)  # B's id counter raised to
    journal: str = ""


def headroom(adds_per_second: float) -> int:
    """Ids left between A's counter and B's raised one (see HEADROOM_FLOOR)."""
    return max(HEADROOM_FLOOR, int(adds_per_second * HEADROOM_SECONDS))


async def migrate_live(
    source: str,
    destination: str,
    queues: Sequence[str] | None = None,
    quiet_for: float = 10.0,
    journal: str | None = None,
    progress: Callable[[LiveProgress], None] | None = None,
    batch_size: int = BATCH,
) -> LiveResult:
    """Move the queues (default: all of A's) from `source` to `destination` while both are in
    use; returns once A holds none of their jobs and nothing moved for `quiet_for` seconds.
    `journal`: the journal file (default: in the working folder, named from the two URLs);
    run again with the same one after a crash. Bad input raises MigrateError, writing
    nothing."""
    check_live_pair(source, destination)
    if quiet_for < 0 or batch_size < 1:
        raise MigrateError(f"quiet_for must be >= 0 and batch_size >= 1: {quiet_for}, {batch_size}")
    a = await _open(source, "source")
    try:
        names = await _queue_names(a, source, queues)
        b = await _open(destination, "destination")
        try:
            book = Journal(
                journal or default_journal_path(source, destination), source, destination
            )
            try:
                move = LiveMove(a, b, book, names, batch_size, progress)
                return await move.run(quiet_for)
            finally:
                book.close()
        finally:
            await release_backend(b)
    finally:
        await release_backend(a)


def check_live_pair(source: str, destination: str) -> None:
    scheme(source), scheme(destination)  # each names a backend
    same_file = sqlite_path(source) is not None and sqlite_path(source) == sqlite_path(destination)
    if source == destination or same_file:
        raise MigrateError(f"source and destination are the same backend: {redact_url(source)!r}")
    check_source(source)  # a SQLite file that is not there is not created


async def _open(url: str, side: str) -> BackendAdapter:
    try:
        backend = await open_backend(url)
    except PsyqError as exc:
        raise MigrateError(f"cannot open the {side} {redact_url(url)!r}: {exc}") from None
    try:
        await backend.now_ms()  # a server is reached now, not at the first write
    except (PsyqError, OSError) as exc:
        await release_backend(backend)
        raise MigrateError(f"cannot reach the {side} {redact_url(url)!r}: {exc}") from None
    return backend


async def _queue_names(a: BackendAdapter, url: str, queues: Sequence[str] | None) -> list[str]:
    present = await a.list_queues()
    if queues is None:
        return present
    unknown = [name for name in queues if name not in present]
    if unknown:
        raise MigrateError(f"no queue {unknown[0]!r} in {redact_url(url)!r} (it has {present})")
    return list(queues)


def is_conflict(error: PsyqError) -> bool:
    """B refused an import because it holds a different job under one of its ids (each
    store says so in these words; the contract has no error class of its own for it)."""
    text = str(error)
    return "a different job" in text or "exists with other contents" in text  # Postgres


class LiveMove:
    """One run of a live move (see the module docstring)."""

    def __init__(
        self,
        a: BackendAdapter,
        b: BackendAdapter,
        book: Journal,
        queues: list[str],
        batch_size: int,
        progress: Callable[[LiveProgress], None] | None,
    ) -> None:
        self.a, self.b, self.book, self.queues = a, b, book, queues
        self.batch_size = batch_size
        self.progress = progress
        self.result = LiveResult(queues, journal=book.path)
        self.started = self.first_try = time.monotonic()
        self.reported_at = -1e9
        self.left = self.active = 0
        self.flows_seen = False
        self.moving: tuple[float, float] | None = None  # first and last move of this run
        self.copies: dict[str, set[str]] = {}  # finished jobs copied to B, A refused to remove
        self.removed: list[tuple[str, str]] = []  # receipts removed from B, still journaled

    async def run(self, quiet_for: float) -> LiveResult:
        await self.replay()
        paused_now = [queue for queue in self.queues if await self.pause(queue)]
        sampled = await self.raise_counters()  # its sample of A's pace outlasts the grace
        if paused_now and not sampled:
            await asyncio.sleep(PAUSE_GRACE)
        quiet_since = time.monotonic()
        while True:
            moved = 0
            for queue in self.queues:
                moved += await self.move_queue(queue)
            if self.flows_seen:
                moved += await self.move_flows()
            await self.count_left()
            now = time.monotonic()
            if moved or self.left:
                quiet_since = now
            elif now - quiet_since >= quiet_for:
                break
            self.report()
            if not moved:
                await asyncio.sleep(PASS_IDLE)
        self.result.seconds = time.monotonic() - self.started
        self.result.rate = self._rate()
        self.report(done=True)
        return self.result

    # ------------------------------------------------------------------ setup
    async def replay(self) -> None:
        """Settle the entries a killed run left, in their order: one B holds a receipt for
        arrived there (B's workers may have run and removed it since) and is marked done;
        one A no longer holds is imported into B; one A still holds was never removed, and
        is moved now while its queue is still paused on A (so no worker took it since it
        was journaled), else left to the next pass (read again)."""
        await self.remove_receipts(self.book.receipts())
        pending = self.book.pending()
        arrived = await self.arrived(pending)
        paused: dict[str, bool] = {}
        for entry in pending:
            if entry.kind == "scheduler":
                if await self.a.get_job_scheduler(entry.queue, entry.item) is not None:
                    self.book.mark([entry.seq], KEPT)
                else:
                    await self._upsert_scheduler(entry.queue, entry.item, entry.payload)
                    await self.b.wait_committed()
                    self.book.mark([entry.seq], DONE)
                continue
            if entry.seq in arrived:
                continue
            if await self.a.get_job(entry.queue, entry.item) is not None:
                if entry.queue not in paused:
                    paused[entry.queue] = await self.a.is_paused(entry.queue)
                if not paused[entry.queue] or not await self.a.remove_job(
                    entry.queue, entry.item, remove_children=False
                ):
                    self.book.mark([entry.seq], KEPT)
                    continue
                await self.a.wait_committed()
            await self._import(entry.queue, [entry.seq], [entry.payload])

    async def arrived(self, pending: list[Entry]) -> set[int]:
        """The pending job entries B holds a receipt for (each receipt is named from the
        first entry of its import, so one lookup per pending entry finds them all): marked
        done, their receipts removed."""
        arrived: set[int] = set()
        for entry in pending:
            if entry.kind != "job" or entry.seq in arrived:
                continue
            receipt = self.book.receipt_id(entry.seq)
            seqs = receipt_seqs(await self.b.get_job(entry.queue, receipt))
            if seqs:
                self.book.mark(sorted(seqs), DONE, (entry.queue, receipt), self._removed())
                await self.remove_receipts([(entry.queue, receipt)])
                arrived |= seqs
        return arrived

    async def remove_receipts(self, receipts: list[tuple[str, str]]) -> None:
        """Remove marked imports' receipts from B; the next mark forgets them."""
        for queue, receipt in receipts:
            await self.b.remove_job(queue, receipt, remove_children=False)
        self.removed += receipts

    def _removed(self) -> list[tuple[str, str]]:
        removed, self.removed = self.removed, []
        return removed

    async def raise_counters(self) -> bool:
        """B's id counter of each queue to A's + headroom, once per move (journaled);
        True when it watched A's counter for RATE_SAMPLE seconds to measure A's pace."""
        first = {q: await self._last_id(q) for q in self.queues if self._floor(q) is None}
        if first:
            await asyncio.sleep(RATE_SAMPLE)
        for queue, before in first.items():
            after = await self._last_id(queue)
            rate = (after - before) / RATE_SAMPLE
            floor = after + headroom(rate)
            meta = await self.b.get_queue_meta(queue)
            await self.b.set_queue_meta(
                queue, {**meta, "last_id": floor, "dedup": {}, "schedulers": {}}
            )
            await self.b.wait_committed()
            self.book.set_setting(f"floor:{queue}", str(floor))
        self.result.floors = {q: self._floor(q) or 0 for q in self.queues}
        return bool(first)

    def _floor(self, queue: str) -> int | None:
        value = self.book.setting(f"floor:{queue}")
        return None if value is None else int(value)

    async def _last_id(self, queue: str) -> int:
        return int((await self.a.get_queue_meta(queue)).get("last_id") or 0)

    async def pause(self, queue: str) -> bool:
        """Pause the queue on A (journaled first: a rerun knows the pause was the move's).
        A queue paused before the move stays so, and is paused on B too."""
        if self.book.setting(f"paused_before:{queue}") is None:
            before = await self.a.is_paused(queue)
            self.book.set_setting(f"paused_before:{queue}", json.dumps(before))
            if before:
                await self.b.pause(queue)
                await self.b.wait_committed()
        if await self.a.is_paused(queue):
            return False
        await self.a.pause(queue)
        await self.a.wait_committed()
        return True

    # ------------------------------------------------------------------ schedulers
    async def move_schedulers(self, queue: str) -> None:
        """Each scheduler: journaled, removed from A (its pending run with it), upserted on
        B, which makes its next run there: only one side produces runs."""
        if not await self.a.get_job_schedulers(queue, 0, 0, True):
            return  # (the queue's metadata may walk a Redis keyspace: only when needed)
        found = (await self.a.get_queue_meta(queue)).get("schedulers") or {}
        for scheduler_id, spec in found.items():
            (seq,) = self.book.write(queue, "scheduler", [(scheduler_id, spec)])
            if not await self.a.remove_job_scheduler(queue, scheduler_id):
                self.book.mark([seq], KEPT)
                continue
            await self.a.wait_committed()  # A makes no run of it again, even after a crash
            await self._upsert_scheduler(queue, scheduler_id, spec)
            await self.b.wait_committed()
            self.book.mark([seq], DONE)
            self.result.schedulers += 1

    async def _scheduled_on_a(self, queue: str, job: JobRecord) -> bool:
        """A scheduler's pending run ("repeat:<id>:<ms>", delayed) whose scheduler is still
        on A (upserted after this pass moved schedulers): it moves with its scheduler, at
        the next pass, so that B makes the runs after it."""
        if job.state != "delayed" or not job.id.startswith("repeat:"):
            return False
        scheduler_id = job.id[len("repeat:") :].rpartition(":")[0]
        return await self.a.get_job_scheduler(queue, scheduler_id) is not None

    async def _upsert_scheduler(
        self, queue: str, scheduler_id: str, spec: Mapping[str, Any]
    ) -> None:
        name, data, opts, _timestamp = spec["template"]
        keys = ("every", "pattern", "tz", "limit", "startDate", "endDate", "offset")
        repeat = {key: spec[key] for key in keys if spec.get(key) is not None}
        template = NewJob(name, data if isinstance(data, str) else json.dumps(data), dict(opts))
        await self.b.upsert_job_scheduler(queue, scheduler_id, repeat, template)

    # ------------------------------------------------------------------ jobs
    async def move_queue(self, queue: str) -> int:
        """One pass over the queue on A in line order. After a page that moved jobs the
        export starts again (a cursor may count positions the removed jobs held)."""
        moved = 0
        cursor: str | None = None
        if await self.pause(queue):  # someone resumed it: A's workers may take again
            await asyncio.sleep(PAUSE_GRACE)
        await self.move_schedulers(queue)  # those upserted on A meanwhile too
        while True:
            page = await self.a.export_jobs(queue, cursor, self.batch_size)
            plain = []
            copies = self.copies.get(queue, set())
            for job in page.jobs:
                if job.parent_key or job.id in page.deps or job.state == "waiting-children":
                    self.flows_seen = True  # moved as a unit by move_flows
                elif (
                    job.state != "active"
                    and job.id not in copies
                    and not await self._scheduled_on_a(queue, job)
                ):
                    plain.append(job)
            skipped = len(copies)
            count = await self.move_jobs(queue, page, plain) if plain else 0
            skipped = len(self.copies.get(queue, set())) - skipped
            moved += count
            if page.next_cursor is None:
                return moved
            cursor = None if count > skipped else page.next_cursor
            self.report()

    async def move_jobs(self, queue: str, page: ExportPage, jobs: list[JobRecord]) -> int:
        """Journal, remove from A, import into B, mark done. Returns the jobs moved."""
        self.first_try = time.monotonic() if self.moving is None else self.moving[0]
        payloads = [job_payload(page, job) for job in jobs]
        await self._carry_dedup(queue, jobs)
        seqs = self.book.write(
            queue, "job", [(job.id, p) for job, p in zip(jobs, payloads, strict=True)]
        )
        removed = await asyncio.gather(
            *(self.a.remove_job(queue, job.id, remove_children=False) for job in jobs)
        )
        await self.a.wait_committed()  # a crash of A's process cannot bring them back
        taken = []
        for job, seq, payload, gone in zip(jobs, seqs, payloads, removed, strict=True):
            if gone or await self._refused_finished(queue, job):
                taken.append((seq, payload))
            else:
                self.book.mark([seq], KEPT)
        if not taken:
            return 0
        return await self._import(queue, [s for s, _ in taken], [p for _, p in taken])

    async def _refused_finished(self, queue: str, job: JobRecord) -> bool:
        """A finished job A would not remove (BullMQ's Postgres layout keeps a scheduler's
        runs from `remove`): copied to B now, left on A until `clear_copies`."""
        if job.state not in FINISHED or await self.a.get_job(queue, job.id) is None:
            return False
        self.copies.setdefault(queue, set()).add(job.id)
        return True

    async def clear_copies(self, queue: str, active: int) -> None:
        """Once nothing is active on A (so no job can finish there: the queue is paused),
        and every finished job A still holds is one already copied to B, drop them with
        `clean` (which takes a scheduler's runs too)."""
        copies = self.copies.get(queue)
        if not copies or active:
            return
        finished = await self.a.get_jobs(queue, list(FINISHED), 0, -1, True)
        if all(job.id in copies for job in finished):
            for state in FINISHED:
                await self.a.clean(queue, 0, 0, state)
            await self.a.wait_committed()
            self.copies.pop(queue)

    async def _import(self, queue: str, seqs: list[int], payloads: list[dict[str, Any]]) -> int:
        """Import journaled jobs into B with their receipt (a page at once; one by one when
        B refuses the page, so only the job B holds differently is refused), wait for B to
        commit them, mark them, and remove the receipt."""
        receipt = self.book.receipt_id(seqs[0])
        page = entry_page(payloads)
        page.jobs.append(receipt_record(receipt, queue, seqs, int(time.time() * 1000)))
        try:
            await self.b.import_jobs(queue, page)
        except PsyqError as exc:
            if not is_conflict(exc):
                raise  # B cannot be reached, or refused for another reason: the entries stay
                # pending in the journal, and a rerun imports them
            if len(payloads) == 1:
                self.book.mark(seqs, CONFLICT)
                self.result.conflicts += 1
                return 0
            moved = 0
            for seq, payload in zip(seqs, payloads, strict=True):
                moved += await self._import(queue, [seq], [payload])
            return moved
        await self.b.wait_committed()
        self.book.mark(seqs, DONE, (queue, receipt), self._removed())
        await self.remove_receipts([(queue, receipt)])
        self.result.moved += len(seqs)
        now = time.monotonic()
        self.moving = (self.moving[0] if self.moving else self.first_try, now)
        return len(seqs)

    async def _carry_dedup(self, queue: str, jobs: list[JobRecord]) -> None:
        """Deduplication keys owned by jobs about to move are set on B first (and stay on A:
        a producer still on A is deduplicated against the job wherever it is)."""
        wanted = {}
        for job in jobs:
            spec = job.opts.get("deduplication") or job.opts.get("de")
            if isinstance(spec, Mapping) and isinstance(spec.get("id"), str):
                wanted[spec["id"]] = job.id
        if not wanted:
            return
        held = (await self.a.get_queue_meta(queue)).get("dedup") or {}
        carried = {
            key: held[key] for key, owner in wanted.items() if key in held and held[key][0] == owner
        }
        if carried:
            meta = await self.b.get_queue_meta(queue)
            await self.b.set_queue_meta(queue, {**meta, "dedup": carried, "schedulers": {}})

    # ------------------------------------------------------------------ flows
    async def move_flows(self) -> int:
        """Every flow of the queues on A, read whole; a flow none of whose members is active
        (nor outside the moved queues) moves at once, each parent before its children."""
        members: list[FlowMember] = []
        for queue in self.queues:
            cursor: str | None = None
            while True:
                page = await self.a.export_jobs(queue, cursor, self.batch_size)
                for job in page.jobs:
                    if job.parent_key or job.id in page.deps or job.state == "waiting-children":
                        key = self.a.job_key(queue, job.id)
                        members.append(FlowMember(key, queue, job, job_payload(page, job)))
                cursor = page.next_cursor
                if cursor is None:
                    break
        moved = 0
        for tree in movable_trees(members, self.a.split_job_key, set(self.queues)):
            moved += await self._move_tree(tree)
        self.flows_seen = bool(members) and moved < len(members)
        return moved

    async def _move_tree(self, tree: list[FlowMember]) -> int:
        written = [(m, self.book.write(m.queue, "job", [(m.job.id, m.payload)])[0]) for m in tree]
        moved = []
        for member, seq in written:  # parents first
            if await self.a.remove_job(member.queue, member.job.id, remove_children=False):
                moved.append((member, seq))
            else:
                self.book.mark([seq], KEPT)
        await self.a.wait_committed()
        count = 0
        for member, seq in moved:
            count += await self._import(member.queue, [seq], [member.payload])
        return count

    # ------------------------------------------------------------------ progress
    async def count_left(self) -> None:
        self.left = self.active = 0
        for queue in self.queues:
            counts = await self.a.get_job_counts(queue, list(COUNTED))
            if counts.get("completed") or counts.get("failed"):
                await self.clear_copies(queue, counts.get("active", 0))
                counts = await self.a.get_job_counts(queue, list(COUNTED))
            # waiting jobs of a paused queue count as "paused" on some stores, as both on others
            waiting = max(counts.get("waiting", 0), counts.get("paused", 0))
            self.left += waiting + sum(counts.get(state, 0) for state in STATES[1:])
            self.active += counts.get("active", 0)

    def _rate(self) -> float:
        if self.moving is None or self.moving[1] <= self.moving[0]:
            return 0.0
        return self.result.moved / (self.moving[1] - self.moving[0])

    def report(self, done: bool = False) -> None:
        now = time.monotonic()
        if self.progress is None or (not done and now - self.reported_at < REPORT_EVERY):
            return
        self.reported_at = now
        seconds = now - self.started
        self.progress(
            LiveProgress(
                moved=self.book.count(DONE),
                left=self.left,
                active=self.active,
                schedulers=self.book.count(DONE, "scheduler"),
                conflicts=self.book.count(CONFLICT),
                seconds=seconds,
                rate=self._rate(),
                done=done,
            )
        )
