"""Starting Spark: Java is checked first (a clear message beats a JVM stack trace), workers run
this interpreter, and a session already running in the process is reused, not stopped."""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from psyq_migrate.endpoints import is_local_master
from psyq_migrate.errors import MigrateError

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

T = TypeVar("T")

__all__ = [
    "JAVA_HINT",
    "SparkAhead",
    "active_session",
    "check_java",
    "find_java",
    "first_line",
    "java_major_version",
    "require_visible",
    "run_job",
    "run_partitions",
    "spark_session",
    "start_python_workers",
]

JAVA_HINT = (
    "install Java 17 (e.g. `apt-get install openjdk-17-jre-headless` or `brew install "
    "openjdk@17`) and put `java` on PATH or set JAVA_HOME"
)
MIN_JAVA = 17
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # errors only


def find_java() -> str:
    """The java binary Spark will start: $JAVA_HOME/bin/java, else `java` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
        raise MigrateError(f"JAVA_HOME={home!r} holds no bin/java: Spark needs Java; {JAVA_HINT}")
    found = shutil.which("java")
    if found is None:
        raise MigrateError(f"Java is missing: Spark needs Java {MIN_JAVA}; {JAVA_HINT}")
    return found


def java_major_version(java: str) -> int:
    """The major version `java -version` reports (8 for "1.8.0_x")."""
    try:
        shown = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except OSError as exc:
        raise MigrateError(f"cannot run {java!r}: {exc}; {JAVA_HINT}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', shown)
    if match is None:
        raise MigrateError(f"cannot read the version of {java!r} ({shown.strip()!r}); {JAVA_HINT}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> None:
    java = find_java()
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise MigrateError(
            f"{java} is Java {major}; Spark needs Java {MIN_JAVA} or newer: {JAVA_HINT}"
        )


# The JVM of a local session only schedules tasks and carries their small results: the
# Python workers and the stores do the work, on the same cores. Its optimizing compiler (C2)
# cost more CPU than it saved there: a session's start, its Python workers' start and 20
# small jobs took 18-24 s of JVM CPU with it, about 9.5 s with the quick compiler (C1) alone.
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


@contextmanager
def spark_session(master: str, app_name: str = "psyq") -> Iterator[SparkSession]:
    """A Spark session on `master`; one already active in this process is reused as is (and
    left running), so tests and notebooks share theirs."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise MigrateError("PySpark is not installed: pip install 'psyq[spark]'") from None
    active = active_session()
    if active is not None:
        yield active
        return
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need psyq installed
    java_options = f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"  # errors only
    if master.startswith("local"):
        java_options += " " + LOCAL_JAVA_OPTIONS
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", "1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def active_session() -> SparkSession | None:
    """The session active in this thread (Spark keeps one per thread), if PySpark is there."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def first_line(error: BaseException) -> str:
    """The gist of a Spark error (the Python error raised in a task, not the JVM trace)."""
    text = str(error).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    python_errors = [line for line in lines if "Error:" in line and not line.startswith("\tat ")]
    return (python_errors[-1] if python_errors else lines[0] if lines else repr(error)).strip()


def run_job(rdd: RDD[T], what: str) -> list[T]:
    """collect() an RDD; a failed Spark job becomes a MigrateError saying what failed."""
    try:
        return rdd.collect()
    except Exception as exc:  # py4j / Spark errors carry a JVM trace: keep the gist
        raise MigrateError(f"the Spark job of {what} failed: {first_line(exc)}") from None


def run_partitions(rdd: RDD[T], partitions: Sequence[int], what: str) -> list[T]:
    """The elements of some partitions of an RDD (one Spark job); errors as in `run_job`."""
    try:
        return rdd.context.runJob(rdd, _same, partitions)
    except Exception as exc:  # py4j / Spark errors carry a JVM trace: keep the gist
        raise MigrateError(f"the Spark job of {what} failed: {first_line(exc)}") from None


def _same(items: Iterable[T]) -> Iterable[T]:
    return items


class SparkAhead:
    """Spark made ready in a thread while the driver plans: the session (the given one, or a
    new one on `master`, stopped by `close`) and its Python workers, one per partition, with
    the task code imported. A session's first job spends about 3 s starting its Python
    workers; started here, beside the plan, the migration's first task starts at once."""

    def __init__(self, spark: SparkSession | None, master: str, partitions: int | None) -> None:
        self._given = spark or active_session()  # looked up here: the thread sees none
        self._master = master
        self._partitions = partitions
        self._stack = ExitStack()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="psyq-spark-ahead")
        self._ready: Future[SparkSession] = self._pool.submit(self._start)

    def _start(self) -> SparkSession:
        session = self._given or self._stack.enter_context(spark_session(self._master))
        start_python_workers(session, self._partitions or session.sparkContext.defaultParallelism)
        return session

    def session(self) -> SparkSession:
        """The session, once its workers are up (raises what starting it raised)."""
        return self._ready.result()

    def close(self) -> None:
        """Wait for the start to end (its error was for `session`), then stop a session
        started here."""
        self._pool.shutdown(wait=True)
        self._stack.close()


def start_python_workers(session: SparkSession, count: int) -> None:
    """Start `count` of Spark's Python workers (reused by later jobs) with the task code
    imported: a session's first Python job spends 2-3 s on that. A no-op in effect when
    they are up already (one empty job, ~0.1 s)."""
    rdd = session.sparkContext.parallelize(range(count), count)
    run_job(rdd.mapPartitions(_import_task_code), "starting Spark's Python workers")


def _import_task_code(_: Iterable[int]) -> Iterator[int]:
    import psyq_migrate.writing  # noqa: F401  (a worker keeps its imports for the next task)

    return iter(())


def require_visible(session: SparkSession, folders: Mapping[str, tuple[str, str]]) -> None:
    """Under a cluster master, check that Spark tasks see each folder as this process does,
    before anything is written: the driver drops a marker file into each, and a few tasks
    (one per core the session has) look for it. A task that misses one raises MigrateError
    naming the folder's use (`folders[folder][0]`), the task's host, the master and the fix
    (`folders[folder][1]`). A local master's tasks run here: nothing to check. A folder the
    driver cannot write a marker into is not checked."""
    master = str(session.sparkContext.master)
    if not folders or is_local_master(master):
        return
    markers: dict[str, str] = {}
    try:
        for folder in folders:
            marker = os.path.join(folder, f".psyq-probe-{uuid.uuid4().hex}")
            try:
                with open(marker, "x"):
                    markers[folder] = marker
            except OSError:
                continue
        tasks = max(2, session.sparkContext.defaultParallelism)
        probe = session.sparkContext.parallelize(range(tasks), tasks)
        check = functools.partial(_missed_markers, dict(markers))
        missed = run_job(probe.mapPartitions(check), "checking file access")
    finally:
        for marker in markers.values():
            os.unlink(marker)
    if missed:
        host, folder = missed[0]
        what, fix = folders[folder]
        raise MigrateError(
            f"{what}, but a Spark task on {host} (master {master}) cannot see its folder "
            f"{folder!r}: {fix}"
        )


def _missed_markers(markers: Mapping[str, str], _: Iterable[int]) -> Iterator[tuple[str, str]]:
    """mapPartitions body of `require_visible`: (host, folder) for each marker not seen."""
    host = socket.gethostname()
    return iter(
        [(host, folder) for folder, marker in markers.items() if not os.path.exists(marker)]
    )
