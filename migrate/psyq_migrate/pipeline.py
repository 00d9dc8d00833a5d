"""`migrate()`: copy every queue of one backend into another with Spark.

The driver plans (queues, counts, conflicts), then reads the source in waves through
`export_jobs`; each wave becomes one Spark job whose tasks import their slices through the
destination's `import_jobs` (idempotent by job id, so a rerun after a crash writes only what
is missing). A slice holds one queue's pages in line order and waves run one after another,
so every queue keeps its order. A single-owner destination (a SQLite file) gets one task per
wave: one process writes it at a time, and the driver opens it only between waves. Queue
metadata (paused flag, id counter, limits, schedulers, dedup keys) follows the jobs.

The source can instead be read by the tasks themselves (`read_in_tasks`): one Spark job
whose tasks each export their queues and import them page by page. A SQLite source is read
from its tables (`sources`), never rebuilt: the driver owns the file meanwhile and the tasks
read it read-only. `auto` (None) lets tasks read only a source every executor reaches: any
but `memory://` on a local master (and not SQLite into SQLite), only a server on a cluster.
Under a cluster master, files the tasks must open (a SQLite destination, a SQLite source
read in tasks) are probed first (`spark.require_visible`): a plan that cannot work stops
before anything is written.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from psyq.backends import open_backend, release_backend
from psyq.backends.base import JOB_STATES, QueueMeta
from psyq.backends.sqlite import SqliteExport
from psyq.errors import PsyqError
from psyq_migrate.endpoints import (
    absolute_url,
    check_pair,
    default_batch_size,
    is_single_owner,
    scheme,
    sqlite_path,
    tasks_can_read,
)
from psyq_migrate.errors import MigrateError
from psyq_migrate.reading import Batch, WaveReader, pack
from psyq_migrate.sources import ExportSource, open_source, release_source
from psyq_migrate.spark import SparkAhead, active_session, require_visible, run_job
from psyq_migrate.verify import VerifyReport, compare, find_conflict
from psyq_migrate.writing import BatchResult, copy_partition, write_partition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "MigrateOptions",
    "MigrationResult",
    "Observer",
    "QueuePlan",
    "migrate",
    "plan_migration",
    "verify_backends",
]


# Pages each task imports per wave. A task opens the destination for its wave; a SQLite file
# rebuilds its memory from disk on open, so single-owner destinations get fewer, larger waves.
PAGES = 10
SINGLE_OWNER_PAGES = 50


@dataclass(frozen=True)
class MigrateOptions:
    source: str
    destination: str
    queues: Sequence[str] | None = None  # None: every queue of the source
    overwrite: bool = False
    dry_run: bool = False
    verify: bool = False
    partitions: int | None = None  # parallel writers; None: Spark's default parallelism
    batch_size: int | None = None  # jobs per export page / import call; None: by destination

    pages_per_task: int | None = None  # pages per task per wave; None: 10, or 50 (one owner)
    read_in_tasks: bool | None = None  # None: auto (see `reads_in_tasks`)

    @property
    def page_size(self) -> int:
        """`batch_size`, or the destination's default (`endpoints.default_batch_size`)."""
        return default_batch_size(self.destination) if self.batch_size is None else self.batch_size


@dataclass
class QueuePlan:
    name: str
    counts: dict[str, int]  # per export state
    meta: Mapping[str, Any]  # the source's get_queue_meta ({} where none is moved)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class MigrationResult:
    plans: list[QueuePlan]
    moved: dict[str, int] = field(default_factory=dict)  # jobs sent, per queue
    written: dict[str, int] = field(default_factory=dict)  # jobs the destination lacked
    waves: int = 0
    writers: int = 0
    seconds: float = 0.0
    verify: VerifyReport | None = None

    @property
    def total(self) -> int:
        return sum(plan.total for plan in self.plans)


class Observer(Protocol):
    """Told the plan, then every batch moved (the command line draws its progress bar)."""

    def planned(self, plans: list[QueuePlan]) -> None: ...

    def moved(self, queue: str, jobs: int) -> None: ...


def migrate(
    options: MigrateOptions,
    spark: SparkSession | None = None,
    observer: Observer | None = None,
    master: str = "local[*]",
) -> MigrationResult:
    """Run a migration (with dry_run, only its plan, and Spark never starts). The plan checks
    both backends and refuses conflicts before anything is written; meanwhile Spark starts
    in a thread, on `master` unless `spark` is given, with its Python workers."""
    check_pair(options.source, options.destination)
    options = replace(
        options, source=absolute_url(options.source), destination=absolute_url(options.destination)
    )
    master = session_master(spark, master)
    in_tasks = reads_in_tasks(options, master)
    started = time.monotonic()
    ahead = None if options.dry_run else SparkAhead(spark, master, options.partitions)
    try:
        with asyncio.Runner() as runner:
            source = runner.run(open_source(options.source))
            try:
                result = MigrationResult(runner.run(plan_migration(source, options)))
                if observer is not None:
                    observer.planned(result.plans)
                if ahead is not None:
                    session = ahead.session()
                    require_visible(session, files_for_tasks(options, in_tasks))
                    if in_tasks:
                        source = runner.run(_let_tasks_read(source, options.source))
                        copy_in_tasks(options, session, result, observer)
                        if options.verify:
                            source = runner.run(_reopen(source, options.source))
                    else:
                        _move_jobs(runner, source, options, session, result, observer)
                    runner.run(_finish(source, options, result, meta_set=in_tasks))
            finally:
                runner.run(release_source(source))  # a no-op if already let go
    finally:
        if ahead is not None:
            ahead.close()  # stops a session started for this migration
    result.seconds = time.monotonic() - started
    return result


def session_master(spark: SparkSession | None, master: str) -> str:
    """The master the migration runs on: the given (or active) session's, else `master`."""
    session = spark or active_session()
    return master if session is None else str(session.sparkContext.master)


def reads_in_tasks(options: MigrateOptions, master: str = "local[*]") -> bool:
    """Whether Spark tasks read the source rather than the driver. `auto` (None): tasks,
    where every executor reaches the source (`endpoints.tasks_can_read`: any backend but
    `memory://` on a local master, a server backend on a cluster), but not SQLite into SQLite
    (one task would do it all, and the driver reading moves the progress bar batch by
    batch). Asking tasks to read `memory://` is refused; a SQLite file read by tasks on a
    cluster is probed before the copy (`files_for_tasks`)."""
    if options.read_in_tasks is None:
        kind = scheme(options.source)
        into_file = kind == "sqlite" and is_single_owner(options.destination)
        return tasks_can_read(options.source, master) and not into_file
    if options.read_in_tasks and scheme(options.source) == "memory":
        raise MigrateError(
            f"{options.source!r} lives in this process: Spark tasks (master {master}) cannot "
            "read it; use --read driver (or auto)"
        )
    return options.read_in_tasks


def files_for_tasks(options: MigrateOptions, in_tasks: bool) -> Mapping[str, tuple[str, str]]:
    """Under a cluster master, the folders Spark tasks must see as this machine does, each
    with what needs it and the fix (see `spark.require_visible`)."""
    needed: dict[str, tuple[str, str]] = {}
    source, destination = sqlite_path(options.source), sqlite_path(options.destination)
    if destination is not None:
        needed[os.path.dirname(destination)] = (
            f"the destination {options.destination!r} is a file Spark tasks write",
            "put it on a disk every Spark worker mounts at the same path, migrate into a "
            "server backend (redis://, postgresql://, psyq://), or run with --master local[*]",
        )
    if source is not None and in_tasks:
        needed.setdefault(
            os.path.dirname(source),
            (
                f"the source {options.source!r} is a file Spark tasks read (--read tasks)",
                "use --read auto or --read driver (the driver reads the file and ships its "
                "pages to the tasks)",
            ),
        )
    return needed


def copy_in_tasks(
    options: MigrateOptions,
    spark: SparkSession,
    result: MigrationResult,
    observer: Observer | None,
) -> None:
    """One Spark job; each task exports its queues from the source and imports them. A
    single-owner destination gets one task for every queue."""
    names = [plan.name for plan in result.plans]
    single = is_single_owner(options.destination)
    wanted = 1 if single else options.partitions or spark.sparkContext.defaultParallelism
    result.writers = max(1, min(wanted, len(names)))
    if not names:
        return
    # set by the tasks, after the jobs
    metas = {plan.name: cast(QueueMeta, plan.meta) for plan in result.plans}
    task = functools.partial(
        copy_partition,
        options.source,
        options.destination,
        options.overwrite,
        options.page_size,
        metas,
    )
    rdd = spark.sparkContext.parallelize(names, result.writers).mapPartitions(task)
    outcomes: list[BatchResult] = run_job(rdd, "migrate")
    result.waves = 1
    _account(outcomes, None, result, observer)


async def _let_tasks_read(source: ExportSource, url: str) -> ExportSource:
    """Before tasks read the source: the driver keeps a SQLite file it reads from its tables
    (its lock keeps writers out; the tasks read beside it) and lets go of any other backend
    (a SQLite file opened through the engine is written out and unlocked)."""
    if isinstance(source, SqliteExport):
        return source
    await release_source(source)
    return source


async def _reopen(source: ExportSource, url: str) -> ExportSource:
    if isinstance(source, SqliteExport):
        return source
    return await open_source(url)


async def plan_migration(source: ExportSource, options: MigrateOptions) -> list[QueuePlan]:
    """The queues to move with their counts and metadata; refuses unknown queue names and (without
    overwrite) a destination holding different jobs under the same ids. The destination
    opens (a Postgres schema is created or upgraded) while the source lists its queues (a
    Redis source walks its whole keyspace: ~1.4 s for a million jobs)."""
    opening = None
    if _destination_exists(options.destination):
        opening = asyncio.ensure_future(open_source(options.destination))
    try:
        names = await _queue_names(source, options)
        plans = [
            QueuePlan(
                name,
                await source.get_job_counts(name, list(JOB_STATES)),
                await source.get_queue_meta(name),
            )
            for name in names
        ]
        if opening is not None:
            await _check_destination(source, await opening, options, names)
        return plans
    finally:
        if opening is not None:
            await _release_opened(opening)


async def _release_opened(opening: asyncio.Future[ExportSource]) -> None:
    """Let go of a destination opened beside the plan, once its opening has ended (an error
    it raised was the plan's to report, or lost to an earlier one)."""
    await asyncio.wait([opening])
    if not opening.cancelled() and opening.exception() is None:
        await release_source(opening.result())


async def _queue_names(source: ExportSource, options: MigrateOptions) -> list[str]:
    try:
        present = await source.list_queues()
    except PsyqError as exc:
        raise MigrateError(f"cannot list the queues of {options.source!r}: {exc}") from None
    if options.queues is None:
        return present
    unknown = [name for name in options.queues if name not in present]
    if unknown:
        raise MigrateError(f"no queue {unknown[0]!r} in {options.source!r} (it has {present})")
    return list(options.queues)


def _destination_exists(url: str) -> bool:
    """False for a SQLite file not created yet (a dry run must not create it)."""
    path = sqlite_path(url)
    return path is None or os.path.exists(path)


async def _check_destination(
    source: ExportSource, destination: ExportSource, options: MigrateOptions, names: list[str]
) -> None:
    """Without overwrite, refuse different jobs under ids the source uses. (Opening the
    destination came first: a bad URL or an unreachable server fails before Spark starts.)"""
    present = set(await destination.list_queues())
    for name in names:
        if options.overwrite or name not in present:
            continue
        job_id = await find_conflict(source, destination, name, options.page_size)
        if job_id is not None:
            raise MigrateError(
                f"{options.destination!r} already holds a different job {job_id!r} in queue "
                f"{name!r}; nothing was written (use --overwrite to replace such jobs)"
            )


def _move_jobs(
    runner: asyncio.Runner,
    source: ExportSource,
    options: MigrateOptions,
    spark: SparkSession,
    result: MigrationResult,
    observer: Observer | None,
) -> None:
    """Wave after wave; the driver reads the next wave while Spark imports the current one
    (waves still run one after another, so every queue keeps its order)."""
    single = is_single_owner(options.destination)
    writers = 1 if single else options.partitions or spark.sparkContext.defaultParallelism
    result.writers = writers
    pages = options.pages_per_task or (SINGLE_OWNER_PAGES if single else PAGES)
    names = [plan.name for plan in result.plans]
    reader = WaveReader(source, names, options.page_size, writers, pages)
    write = functools.partial(_write_wave, spark, options.destination, options.overwrite, single)
    with ThreadPoolExecutor(1, thread_name_prefix="psyq-migrate-wave") as pool:
        wave = runner.run(reader.next_wave())
        while wave:
            running = pool.submit(write, wave)
            following = runner.run(reader.next_wave())
            outcomes = running.result()
            result.waves += 1
            _account(outcomes, _jobs_in(wave), result, observer)
            wave = following


def _write_wave(
    spark: SparkSession, destination: str, overwrite: bool, single: bool, wave: list[list[Batch]]
) -> list[BatchResult]:
    """One Spark job: a task per slice (one task holding every slice into a single owner)."""
    packed = [[pack(batch) for batch in part] for part in wave]
    slices = [[batch for part in packed for batch in part]] if single else packed
    task = functools.partial(write_partition, destination, overwrite)
    rdd = spark.sparkContext.parallelize(slices, len(slices)).mapPartitions(task)
    outcomes: list[BatchResult] = run_job(rdd, "migrate")
    return outcomes


def _jobs_in(wave: list[list[Batch]]) -> int:
    return sum(len(page.jobs) for part in wave for _, page in part)


def _account(
    outcomes: list[BatchResult],
    sent: int | None,  # None: the tasks read the source themselves
    result: MigrationResult,
    observer: Observer | None,
) -> None:
    failed = next((outcome for outcome in outcomes if outcome.error), None)
    for outcome in outcomes:
        if outcome.error is None:
            result.moved[outcome.queue] = result.moved.get(outcome.queue, 0) + outcome.jobs
            result.written[outcome.queue] = result.written.get(outcome.queue, 0) + outcome.written
            if observer is not None:
                observer.moved(outcome.queue, outcome.jobs)
    if failed is not None:
        raise MigrateError(f"writing queue {failed.queue!r} failed: {failed.error}")
    reported = sum(outcome.jobs for outcome in outcomes)
    if sent is not None and sent != reported:
        raise MigrateError(f"Spark tasks reported {reported} of the {sent} jobs they were sent")


async def _finish(
    source: ExportSource, options: MigrateOptions, result: MigrationResult, meta_set: bool
) -> None:
    """Queue metadata last (after the jobs it refers to; `meta_set`: the tasks did it), then
    the optional verification. Neither left: the destination is not opened again (a SQLite
    file would rebuild its memory from disk just to be closed)."""
    if not meta_set:
        destination = await open_backend(options.destination)
        try:
            for plan in result.plans:
                await destination.set_queue_meta(plan.name, cast(QueueMeta, plan.meta))
        finally:
            await release_backend(destination)
    if options.verify:
        names = [plan.name for plan in result.plans]
        result.verify = await _compare(source, options.destination, names, options.page_size)


async def _compare(
    source: ExportSource, destination_url: str, names: list[str], batch_size: int
) -> VerifyReport:
    destination = await open_source(destination_url)
    try:
        return await compare(source, destination, names, batch_size)
    finally:
        await release_source(destination)


def verify_backends(
    source: str, destination: str, queues: Sequence[str] | None = None, batch_size: int = 1000
) -> VerifyReport:
    """Compare two backends queue by queue and state by state (counts and id checksums)."""
    return asyncio.run(_verify(source, destination, queues, batch_size))


async def _verify(
    source_url: str, destination_url: str, queues: Sequence[str] | None, batch_size: int
) -> VerifyReport:
    source = await open_source(source_url)
    try:
        names = list(queues) if queues is not None else await source.list_queues()
        return await _compare(source, destination_url, names, batch_size)
    finally:
        await release_source(source)
