"""What the pipeline takes from the URLs and the master before touching anything: page
sizes, who reads the source (`auto` never picks a plan a cluster cannot run), and file
paths made absolute for tasks whose working folder is not the driver's."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from psyq_migrate import MigrateError, MigrateOptions
from psyq_migrate.endpoints import absolute_url, tasks_can_read
from psyq_migrate.pipeline import files_for_tasks, reads_in_tasks
from psyq_migrate.spark import _missed_markers, require_visible

CLUSTER = "spark://10.0.0.5:7077"
LOOPBACK_CLUSTER = "spark://127.0.0.1:7077"
SERVERS = ["redis://cache:6379/0", "postgresql://db/jobs", "psyq://engine:6789"]


def test_pages_into_postgres_are_larger_unless_a_size_is_given() -> None:
    assert MigrateOptions("sqlite:///a.db", "postgresql://h/db").page_size == 4000
    assert MigrateOptions("sqlite:///a.db", "postgres://h/db").page_size == 4000
    assert MigrateOptions("sqlite:///a.db", "redis://h:6379/0").page_size == 1000
    assert MigrateOptions("sqlite:///a.db", "sqlite:///b.db").page_size == 1000
    assert MigrateOptions("sqlite:///a.db", "postgresql://h/db", batch_size=7).page_size == 7


@pytest.mark.parametrize("master", ["local[*]", "local[2]", "local", "local-cluster[2,1,1024]"])
def test_auto_on_a_local_master_lets_tasks_read_all_but_memory_and_file_to_file(
    master: str,
) -> None:
    def auto(source: str, destination: str) -> bool:
        return reads_in_tasks(MigrateOptions(source, destination), master)

    for server in SERVERS:
        assert auto(server, "sqlite:///b.db") is True
    assert auto("redis://localhost:6379/0", "postgresql://h/db") is True
    assert auto("sqlite:///a.db", "redis://h:6379/0") is True
    assert auto("sqlite:///a.db", "sqlite:///b.db") is False  # one task would hold both
    assert auto("memory://", "sqlite:///b.db") is False


@pytest.mark.parametrize("master", [CLUSTER, LOOPBACK_CLUSTER, "yarn", "k8s://https://k:6443"])
def test_auto_on_a_cluster_lets_tasks_read_only_servers(master: str) -> None:
    def auto(source: str, destination: str) -> bool:
        return reads_in_tasks(MigrateOptions(source, destination), master)

    for server in SERVERS:
        assert auto(server, "postgresql://db/copy") is True
    for file_or_memory in ("sqlite:///a.db", "sqlite:////data/a.db", "memory://"):
        for destination in ("redis://cache:6379/1", "sqlite:///b.db"):
            assert auto(file_or_memory, destination) is False  # the driver reads and ships


def test_a_loopback_server_is_read_by_tasks_only_when_the_master_is_on_loopback_too() -> None:
    for source in ("redis://localhost:6379/0", "postgresql://127.0.0.1/jobs", "redis://"):
        assert tasks_can_read(source, LOOPBACK_CLUSTER) is True
        assert tasks_can_read(source, CLUSTER) is False  # localhost is the executor's own
        assert tasks_can_read(source, "yarn") is False


def test_asking_tasks_to_read_memory_is_refused_naming_source_master_and_fix() -> None:
    options = MigrateOptions("memory://", "redis://cache:6379/0", read_in_tasks=True)
    with pytest.raises(MigrateError) as caught:
        reads_in_tasks(options, CLUSTER)
    message = str(caught.value)
    assert "memory://" in message and CLUSTER in message and "--read driver" in message


def test_explicit_choices_are_kept() -> None:
    for master in ("local[2]", CLUSTER):
        driver = MigrateOptions("redis://cache:6379/0", "postgresql://db/j", read_in_tasks=False)
        assert reads_in_tasks(driver, master) is False
        tasks = MigrateOptions("sqlite:////data/a.db", "postgresql://db/j", read_in_tasks=True)
        assert reads_in_tasks(tasks, master) is True  # probed on a cluster: files_for_tasks


def test_files_tasks_must_see_are_a_sqlite_destination_and_a_sqlite_source_read_in_tasks() -> None:
    options = MigrateOptions("sqlite:////data/in/a.db", "sqlite:////data/out/b.db")
    assert set(files_for_tasks(options, in_tasks=False)) == {"/data/out"}
    both = files_for_tasks(options, in_tasks=True)
    assert set(both) == {"/data/out", "/data/in"}
    what, fix = both["/data/in"]
    assert "sqlite:////data/in/a.db" in what and "--read driver" in fix
    servers = MigrateOptions("redis://cache:6379/0", "postgresql://db/j")
    assert files_for_tasks(servers, in_tasks=True) == {}


def test_relative_sqlite_paths_become_absolute_and_keep_their_settings(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_url("sqlite:///jobs.db?durability=durable") == (
        f"sqlite:///{tmp_path}/jobs.db?durability=durable"
    )
    assert absolute_url("sqlite:////srv/jobs.db") == "sqlite:////srv/jobs.db"
    assert absolute_url("redis://cache:6379/0") == "redis://cache:6379/0"


def test_a_task_that_cannot_see_a_marker_names_the_folder(tmp_path: Path) -> None:
    seen, unseen = tmp_path / "shared", tmp_path / "elsewhere"
    seen.mkdir()
    (seen / ".psyq-probe-1").write_text("")
    markers = {str(seen): str(seen / ".psyq-probe-1"), str(unseen): str(unseen / ".psyq-probe-2")}
    missed = list(_missed_markers(markers, iter([0])))
    assert missed == [(socket.gethostname(), str(unseen))]


def test_nothing_is_probed_on_a_local_master() -> None:
    session = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))  # runs no job
    require_visible(session, {"/nowhere": ("what", "fix")})  # type: ignore[arg-type]
