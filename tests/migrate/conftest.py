"""Fixtures of the pipeline tests: ONE local Spark session per test run, and the
(source, destination) backend pairs every migration test runs on.

A pair is two URL factories `(request) -> URL`, like the conformance suite's `BACKENDS`.
Adding a pair is one line; once the server backends are merged, for example:

    "sqlite->redis": (sqlite_file("source"), BACKENDS["redis"]),
    "postgres->sqlite": (BACKENDS["postgres"], sqlite_file("destination")),

Tests use fresh queue names and migrate only those queues, so a shared server is fine. Two
URLs of the same server cannot pair (the migration refuses a backend onto itself): give the
destination another database (redis://.../1) or prefix (?prefix=copy).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from pyspark.sql import SparkSession

from tests.conformance.conftest import BACKENDS, UrlFactory, services_required


def sqlite_file(stem: str, durability: str = "buffered") -> UrlFactory:
    """A SQLite file of its own in the test's tmp_path."""

    def factory(request: pytest.FixtureRequest) -> str:
        folder = request.getfixturevalue("tmp_path")
        return f"sqlite:///{folder}/{stem}.db?durability={durability}"

    return factory


PAIRS: dict[str, tuple[UrlFactory, UrlFactory]] = {
    "sqlite->sqlite": (sqlite_file("source"), sqlite_file("destination")),
    "sqlite->sqlite-durable": (sqlite_file("source"), sqlite_file("destination", "durable")),
    # memory:// is read by the driver, in this process (never a destination: see endpoints.py)
    "memory->sqlite": (BACKENDS["memory"], sqlite_file("destination")),
    "sqlite->redis": (sqlite_file("source"), BACKENDS["redis"]),
    "redis->sqlite": (BACKENDS["redis"], sqlite_file("destination")),
    "sqlite->psyq": (sqlite_file("source"), BACKENDS["psyq"]),
    "psyq->sqlite": (BACKENDS["psyq"], sqlite_file("destination")),
    "redis->psyq": (BACKENDS["redis"], BACKENDS["psyq"]),
    "psyq->redis": (BACKENDS["psyq"], BACKENDS["redis"]),
    "sqlite->postgres": (sqlite_file("source"), BACKENDS["postgres"]),
    "redis->postgres": (BACKENDS["redis"], BACKENDS["postgres"]),
    "postgres->sqlite": (BACKENDS["postgres"], sqlite_file("destination")),
    "postgres->redis": (BACKENDS["postgres"], BACKENDS["redis"]),
    "postgres->psyq": (BACKENDS["postgres"], BACKENDS["psyq"]),
    "psyq->postgres": (BACKENDS["psyq"], BACKENDS["postgres"]),
}


@dataclass(frozen=True)
class Pair:
    source: str
    destination: str


@pytest.fixture(params=sorted(PAIRS))
def pair(request: pytest.FixtureRequest) -> Pair:
    source, destination = PAIRS[request.param]
    return Pair(source(request), destination(request))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The run's one Spark session (local[2]); pipeline calls find and reuse it. Without Java
    the tests fail saying what to install (skipped with PSYQ_REQUIRE_SERVICES=0)."""
    from psyq_migrate import MigrateError
    from psyq_migrate.spark import check_java, spark_session  # pyspark: a dev dependency

    try:
        check_java()
    except MigrateError as exc:
        if services_required():
            pytest.fail(f"{exc}; or set PSYQ_REQUIRE_SERVICES=0 to skip these tests")
        pytest.skip(str(exc))
    with spark_session("local[2]", "psyq-tests") as session:
        yield session
