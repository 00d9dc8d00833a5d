"""The pipeline on a real standalone Spark cluster (a Master and a Worker started from the
installed pyspark, `cluster.py`): migrate sqlite -> redis -> postgres -> sqlite with --verify
(the SQLite files named by relative paths, as a user types them), a SQLite source read by
tasks (--read tasks, probed first), export and enqueue, all through
`--master spark://127.0.0.1:PORT`, in one driver process (`cluster_driver.py`). (`psyq
report` runs Spark SQL only, which the cluster adds nothing to but time: ~50 s here.)"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import psyq
from tests.conformance.conftest import postgres_url, redis_url, services_required

from .cluster import Cluster
from .fill import fill_every_state, read_queues

DRIVER = Path(__file__).with_name("cluster_driver.py")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The run's one standalone cluster, stopped at the end of the run."""
    from psyq_migrate import MigrateError
    from psyq_migrate.spark import check_java

    try:
        check_java()
    except MigrateError as exc:
        if services_required():
            pytest.fail(f"{exc}; or set PSYQ_REQUIRE_SERVICES=0 to skip these tests")
        pytest.skip(str(exc))
    cluster = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def run_on_cluster(cluster: Cluster, folder: Path, commands: list[list[str]]) -> list[dict]:  # type: ignore[type-arg]
    (folder / "commands.json").write_text(json.dumps(commands))
    argv = [sys.executable, str(DRIVER), cluster.master_url, "commands.json", "results.json"]
    env = cluster.environment()
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the same psyq as ours
    done = subprocess.run(
        argv, cwd=folder, env=env, capture_output=True, text=True, timeout=400, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict] = json.loads((folder / "results.json").read_text())  # type: ignore[type-arg]
    return results


async def queue_jobs(url: str, queue: str) -> list[tuple[str | None, str, object]]:
    async with psyq.Queue(queue, connection=url) as target:
        jobs = await target.get_jobs(["waiting"], asc=True)
    return [(job.id, job.name, job.data) for job in jobs]


@pytest.mark.timeout(420)  # a Spark application on the cluster: driver and executor JVMs
def test_the_pipeline_runs_on_a_standalone_cluster(
    spark_cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    redis, postgres = redis_url(request), postgres_url(request)
    queues = asyncio.run(fill_every_state(f"sqlite:///{tmp_path}/src.db"))
    names = ",".join(queues)
    (tmp_path / "orders.csv").write_text("id,name,amount\no-1,bill,12.5\no-2,refund,3\n")
    orders = f"orders-{queues[0]}"
    commands = [
        ["migrate", "--from", "sqlite:///src.db", "--to", redis, "--queues", names, "--verify"],
        ["migrate", "--from", redis, "--to", postgres, "--queues", names, "--verify"],
        ["migrate", "--from", postgres, "--to", "sqlite:///copy.db", "--queues", names, "--verify"],
        ["migrate", "--from", "sqlite:///src.db", "--to", "sqlite:///tasks.db", "--read", "tasks"],
        ["export", "sqlite:///copy.db", "--out", "history"],
        ["enqueue", "--from", "orders.csv", "--to", redis, "--queue", orders],
    ]
    results = run_on_cluster(spark_cluster, tmp_path, commands)
    print([(result["argv"][0], result["seconds"]) for result in results])  # seen with -s
    for result in results:
        assert result["code"] == 0, result
    for verified in results[:3]:
        assert "verify: source and destination hold the same jobs" in verified["out"]
    source = read_queues(f"sqlite:///{tmp_path}/src.db", queues)
    assert read_queues(f"sqlite:///{tmp_path}/copy.db", queues) == source
    assert read_queues(f"sqlite:///{tmp_path}/tasks.db", queues) == source
    assert "exported 16 jobs" in results[4]["out"]
    assert "exported 16/16 jobs" in results[4]["err"]  # progress, off a terminal
    assert "enqueued 2/2 rows" in results[5]["err"]
    assert {part.suffix for part in (tmp_path / "history").iterdir()} >= {".parquet"}
    assert asyncio.run(queue_jobs(redis, orders)) == [
        ("o-1", "bill", {"amount": 12.5}),
        ("o-2", "refund", {"amount": 3.0}),
    ]
    assert not list(spark_cluster.folder.glob("work/*/*/*.db"))  # no file opened by mistake
