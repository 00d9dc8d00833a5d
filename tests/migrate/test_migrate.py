"""`migrate()` on a real local Spark session, over every (source, destination) pair."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import psyq
from psyq.cli.main import main
from psyq_migrate import MigrateError, MigrateOptions, migrate, verify_backends
from tests.conftest import fresh_name

from .conftest import PAIRS, Pair
from .fill import fill_every_state, read_queues, state_counts


@pytest.fixture
def filled(pair: Pair) -> list[str]:
    return asyncio.run(fill_every_state(pair.source))


def options(pair: Pair, queues: list[str], **extra: object) -> MigrateOptions:
    return MigrateOptions(pair.source, pair.destination, queues=queues, batch_size=3, **extra)  # type: ignore[arg-type]


def test_every_state_arrives_identical(spark: SparkSession, pair: Pair, filled: list[str]) -> None:
    before = read_queues(pair.source, filled)
    result = migrate(options(pair, filled), spark)
    after = read_queues(pair.destination, filled)
    main_queue, side = filled
    # waiting: w1, w2, the deduplicated job, the scheduler's first run, the active job
    assert state_counts(after[main_queue]) == {
        "waiting": 5,
        "prioritized": 1,
        "delayed": 1,
        "waiting-children": 1,
        "completed": 1,
        "failed": 1,
    }
    assert state_counts(after[side]) == {"waiting": 6}  # the flow's child and five more
    assert after == before  # every field, order within each state, logs, due times, links, meta
    assert result.written == {main_queue: 10, side: 6} == result.moved
    assert after[side]["meta"]["paused"] is True
    assert after[main_queue]["meta"]["schedulers"].keys() == {"tick"}
    assert after[main_queue]["meta"]["dedup"].keys() == {"dedup-1"}
    assert after[main_queue]["logs"] == before[main_queue]["logs"] != {}
    assert after[main_queue]["deps"] == before[main_queue]["deps"] != {}


async def fill_groups(url: str, name: str) -> None:
    async with psyq.Queue(name, connection=url) as queue:
        await queue.add_bulk(
            [{"name": f"{g}{i}", "opts": {"group": {"id": g}}} for i in range(3) for g in "ab"]
        )
        await queue.set_group_concurrency("a", 2)
        await queue.pause_group("b")


async def read_groups(url: str, name: str) -> dict[str, Any]:
    async with psyq.Queue(name, connection=url) as queue:
        return {
            "groups": await queue.get_groups(),
            "a": [job.name for job in await queue.get_group_jobs("a")],
            "b": [job.name for job in await queue.get_group_jobs("b")],
            "a concurrency": await queue.get_group_concurrency("a"),
        }


@pytest.mark.parametrize(
    "pair_id", ["sqlite->redis", "redis->postgres", "postgres->psyq", "psyq->sqlite"]
)
def test_groups_arrive_in_order_with_their_settings(
    spark: SparkSession, request: pytest.FixtureRequest, pair_id: str
) -> None:
    source, destination = (make(request) for make in PAIRS[pair_id])
    name = fresh_name("groups")
    asyncio.run(fill_groups(source, name))
    before = asyncio.run(read_groups(source, name))
    migrate(MigrateOptions(source, destination, queues=[name], batch_size=4), spark)
    after = asyncio.run(read_groups(destination, name))
    assert after == before
    assert before["a"] == ["a0", "a1", "a2"] and before["a concurrency"] == 2
    assert [g["status"] for g in before["groups"]] == ["waiting", "paused"]


def test_a_rerun_writes_nothing_and_new_ids_continue(
    spark: SparkSession, pair: Pair, filled: list[str]
) -> None:
    migrate(options(pair, filled), spark)
    again = migrate(options(pair, filled, verify=True), spark)
    assert again.written == {name: 0 for name in filled}
    assert again.verify is not None and again.verify.ok
    # the source's automatic ids: 8 (BullMQ's Postgres layout gives a flow's parent a
    # UUID, as Node's FlowProducer does, so 7 there)
    given = read_queues(pair.source, filled)[filled[0]]["meta"]["last_id"]
    assert given in (7, 8)

    async def add_one() -> str:
        async with psyq.Queue(filled[0], connection=pair.destination) as queue:
            return (await queue.add("new")).id

    assert int(asyncio.run(add_one())) == given + 1  # after the ids the source gave


def test_verify_catches_a_planted_job(
    spark: SparkSession, pair: Pair, filled: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    migrate(options(pair, filled), spark)

    async def plant() -> None:
        async with psyq.Queue(filled[1], connection=pair.destination) as queue:
            await queue.add("stowaway", job_id="planted")

    asyncio.run(plant())
    report = verify_backends(pair.source, pair.destination, filled)
    [row] = report.differences
    assert (row.queue, row.state, row.source.count, row.destination.count) == (
        filled[1],
        "waiting",
        6,
        7,
    )
    assert row.source.checksum != row.destination.checksum
    argv = ["migrate", "--from", pair.source, "--to", pair.destination, "--verify"]
    assert main([*argv, "--queues", ",".join(filled)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT" in out and "1 difference" in out


def test_a_dry_run_writes_nothing(
    pair: Pair, filled: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    destination = f"sqlite:///{tmp_path}/never.db"
    argv = ["migrate", "--from", pair.source, "--to", destination, "--dry-run"]
    assert main([*argv, "--queues", ",".join(filled)]) == 0
    assert list(tmp_path.glob("never.db*")) == []
    out = capsys.readouterr().out
    assert "nothing written" in out and "total: 16 jobs in 2 queues" in out


def test_a_dry_run_on_an_existing_destination_changes_nothing(
    spark: SparkSession, pair: Pair, filled: list[str]
) -> None:
    migrate(options(pair, [filled[1]]), spark)
    before = read_queues(pair.destination, filled)
    result = migrate(options(pair, filled, dry_run=True))  # no Spark needed
    assert [plan.total for plan in result.plans] == [10, 6]
    assert read_queues(pair.destination, filled) == before


def test_a_different_job_under_the_same_id_is_refused_unless_overwrite(
    spark: SparkSession, pair: Pair, filled: list[str]
) -> None:
    async def impostor() -> None:
        async with psyq.Queue(filled[0], connection=pair.destination) as queue:
            await queue.add("impostor", {"v": 9}, job_id="custom-id")

    asyncio.run(impostor())
    with pytest.raises(MigrateError, match=r"custom-id.*--overwrite"):
        migrate(options(pair, filled), spark)
    assert state_counts(read_queues(pair.destination, filled)[filled[0]]) == {"waiting": 1}
    result = migrate(options(pair, filled, overwrite=True, verify=True), spark)
    assert result.verify is not None and result.verify.ok
    replaced = read_queues(pair.destination, filled)[filled[0]]["jobs"]["custom-id"]
    assert replaced["name"] == "w2"


def test_tasks_can_read_the_source_themselves(
    spark: SparkSession, pair: Pair, filled: list[str]
) -> None:
    """The default for server sources; a SQLite source is let go by the driver meanwhile."""
    if pair.source.startswith("memory://"):
        with pytest.raises(MigrateError, match="memory://"):
            migrate(options(pair, filled, read_in_tasks=True), spark)
        return
    before = read_queues(pair.source, filled)
    result = migrate(options(pair, filled, read_in_tasks=True, verify=True), spark)
    assert result.verify is not None and result.verify.ok
    assert result.written == {filled[0]: 10, filled[1]: 6}
    assert read_queues(pair.destination, filled) == before
