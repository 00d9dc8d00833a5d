"""A process that opens a `sqlite:///` file and then forks (a pre-fork server, a
multiprocessing pool with the fork start method): a child never reuses the parent's
engine, connections or id counter. The Queue it inherited is refused with an error naming
the file and saying to open it after the fork; a Queue it opens after the fork reaches the
file through its owner, the parent, as any other process of the host does."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.server.server_proc import ROOT
from tests.sqlite.test_shared import Child

CHILDREN = 4
ADDS = 100


def stored_ids(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("SELECT id FROM jobs")]
    finally:
        conn.close()


def run_forking(url: str, how: str, parent: str) -> subprocess.CompletedProcess[str]:
    """Run fork_procs; `parent`: "owner" (it owns the file) or "peer" (another process
    does, idle meanwhile)."""
    argv = [sys.executable, "-m", "tests.sqlite.fork_procs", url, str(CHILDREN), str(ADDS), how]
    if parent == "owner":
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    owner = Child("idle", url)
    try:
        owner.wait_for(lambda: "ready owner" in owner.lines, "the owner did not start")
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        assert owner.end(signal.SIGTERM) == 0, owner.stderr()


@pytest.mark.parametrize("parent", ["owner", "peer"], ids=["parent-owns", "parent-is-a-peer"])
@pytest.mark.parametrize("how", ["fork", "pool"], ids=["os.fork", "multiprocessing-fork-pool"])
@pytest.mark.parametrize("durability", ["durable", "buffered"])
def test_children_forked_after_open_never_share_the_parent_s_engine(
    tmp_path: Path, durability: str, how: str, parent: str
) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}?durability={durability}"
    done = run_forking(url, how, parent)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"children exited {[0] * CHILDREN}" in lines, lines[-5:]
    inherited = [line for line in lines if line.startswith("inherited ")]
    assert len(inherited) == 2 * CHILDREN  # an add and a read each
    for line in inherited:  # refused, saying why and what to do
        assert line.startswith(("inherited PsyqError: ", "inherited read PsyqError: ")), line
        assert str(path) in line and "fork" in line and "after" in line, line
    assert [line for line in lines if line.startswith(("error", "child failed"))] == []
    acked = [line.split()[-1] for line in lines if "added " in line]
    shown = f"{how}, {durability}, parent {parent}"
    print(f"{shown}: acknowledged {len(acked)}, distinct {len(set(acked))}")
    assert len(acked) == CHILDREN * ADDS + 2
    twice = {job_id for job_id, count in Counter(acked).items() if count > 1}
    assert twice == set(), f"{len(twice)} ids handed out twice"
    stored = stored_ids(path)
    assert set(acked) - set(stored) == set()
    assert len(stored) == len(acked)


def test_a_child_forked_after_open_takes_the_file_over_when_its_parent_dies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}?durability=durable"
    argv = [sys.executable, "-m", "tests.sqlite.fork_procs", url, "1", str(ADDS), "outlive"]
    lines: list[str] = []
    with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True) as parent:
        assert parent.stdout is not None
        for line in parent.stdout:  # the child inherited the pipe: read until it closes
            lines.append(line.strip())
            if line.startswith(("waiting for the parent", "child failed")):
                parent.kill()  # kill -9: the parent's lock and sockets go with it
    acked = [line.split()[-1] for line in lines if "added " in line]
    unknown = [line for line in lines if line.startswith("error ConnectionError")]
    print(f"after the parent's kill -9: {lines[-1]!r}, acknowledged {len(acked)}, "
          f"unknown {len(unknown)}")  # fmt: skip
    assert lines[-1] == "role owner", lines[-5:]
    assert [line for line in lines if line.startswith(("error", "child failed"))] == unknown
    assert len(unknown) <= 1  # the call in flight at the kill: its outcome is unknown
    assert len(acked) == 2 * ADDS + 1 - len(unknown) and len(set(acked)) == len(acked)
    assert set(acked) <= set(stored_ids(path))
