"""Faults of a shared `sqlite:///` file: a takeover through any alias of the file,
a file moved or deleted under its processes, ids after a buffered crash. Real processes;
fault tests count outcomes (lost == 0)."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import psyq
from psyq.errors import PsyqError
from tests.server.server_proc import ROOT
from tests.soak import report, scaled
from tests.sqlite.test_file_owner import ALIASES, add_from_child, hard_link
from tests.sqlite.test_shared import Child, stored_ids


def relative(path: Path) -> Path:
    return Path(os.path.relpath(path, ROOT))  # the children run in ROOT


EVERY_ALIAS: dict[str, Callable[[Path], Path]] = {**ALIASES, "relative path": relative}


def finish(child: Child, timeout: float = 60) -> int:
    """Wait for `child` to exit by itself (killed past `timeout`); its exit code."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.proc.wait(timeout)
    return child.end(signal.SIGKILL)


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.timeout(scaled(60))
@pytest.mark.parametrize("alias", EVERY_ALIAS.values(), ids=EVERY_ALIAS.keys())
def test_a_peer_through_any_alias_takes_over_a_killed_owner_losing_nothing(
    tmp_path: Path, alias: Callable[[Path], Path]
) -> None:
    """Scaled by `make soak-stores`: the adds before and after the kill (tests/soak.py)."""
    started = time.monotonic()
    path = tmp_path / "jobs.db"
    (tmp_path / "sub").mkdir()
    assert add_from_child(f"sqlite:///{path}") == "1"  # the file exists before its aliases
    other = alias(path)
    owner = Child("load", f"sqlite:///{path}")
    owner.wait_for(lambda: "ready owner" in owner.lines, "the owner did not start")
    peers = [Child("load", f"sqlite:///{other}") for _ in range(2)]
    try:
        for peer in peers:
            peer.wait_for_acks(scaled(200), "a peer's adds were not acknowledged")
        assert owner.end(signal.SIGKILL) == -signal.SIGKILL
        before = [len(peer.acked()) for peer in peers]
        for peer, count in zip(peers, before, strict=True):
            peer.wait_for_acks(count + scaled(100), "no peer took over")
    finally:
        for peer in peers:
            peer.end(signal.SIGKILL)
    acked = {"1"}.union(owner.acked(), *(peer.acked() for peer in peers))
    lost = acked - stored_ids(path)
    checked = integrity(path)
    seconds = time.monotonic() - started
    report(
        f"shared file, owner killed, peer through {other.name}",
        seconds,
        acked=len(acked),
        lost=len(lost),
        integrity=checked,
    )
    assert lost == set()
    assert checked == "ok"
    assert sum("took it over" in peer.stderr() for peer in peers) == 1
    again = Child("some", f"sqlite:///{other}", "1")  # psyq reopens it through the alias
    assert finish(again) == 0, again.stderr()
    assert set(again.acked()) - acked == set(again.acked()) <= stored_ids(path)
    assert integrity(path) == "ok"


def move_away(path: Path) -> None:
    path.rename(path.with_name("moved.db"))


def delete(path: Path) -> None:
    path.unlink()


def replace_by_an_empty_file(path: Path) -> None:
    move_away(path)
    path.touch()


GONE: dict[str, Callable[[Path], None]] = {"moved": move_away, "deleted": delete}
GONE_OR_EMPTIED = {**GONE, "moved, an empty file put in its place": replace_by_an_empty_file}


@pytest.mark.parametrize("lose", GONE_OR_EMPTIED.values(), ids=GONE_OR_EMPTIED.keys())
def test_a_file_gone_under_its_journal_is_refused_saying_so(
    tmp_path: Path, lose: Callable[[Path], None]
) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"
    owner = Child("load", url)
    try:
        owner.wait_for_acks(20, "the owner did not add")
        lose(path)  # its -wal and -shm stay, in use by the owner
        assert Path(f"{path}-wal").exists()
        answer = add_from_child(url)
    finally:
        owner.end(signal.SIGKILL)
    print(answer)
    assert answer.startswith("PsyqError: "), answer
    assert f"{path}-wal" in answer and "moved or deleted" in answer, answer
    assert "a corrupted file must be restored" not in answer, answer
    emptied = lose is replace_by_an_empty_file
    assert path.exists() == emptied and not (emptied and path.stat().st_size)  # nothing made
    assert Path(f"{path}-wal").exists()  # nor the other file's journal removed


@pytest.mark.parametrize("lose", GONE.values(), ids=GONE.keys())
def test_a_peer_never_takes_over_a_new_file_after_its_file_went_away(
    tmp_path: Path, lose: Callable[[Path], None]
) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"
    owner = Child("each", url)
    owner.wait_for(lambda: "ready owner" in owner.lines, "the owner did not start")
    peer = Child("each", url)
    try:
        peer.wait_for_acks(20, "the peer's adds were not acknowledged")
        lost_at = time.monotonic()  # the lines' clock: the reader thread may lag behind
        lose(path)
        peer.wait_for(lambda: "error" in peer.lines[-1], "the peer's adds did not fail")
        owner.end(signal.SIGTERM)
        gone = len(peer.lines)
        peer.wait_for(lambda: len(peer.lines) > gone + 20, "the peer stopped trying")
    finally:
        peer.end(signal.SIGKILL)
        owner.end(signal.SIGKILL)
    after = peer.lines[gone:]
    print(f"after the owner exited: {after[0]!r} ... {len(after)} calls")
    assert [line for line in after if line.startswith("added")] == []
    assert all(str(path) in line and "restart" in line for line in after), after[:3]
    acked_after_loss = [line for line in peer.lines if acked_after(line, lost_at)]
    assert len(acked_after_loss) <= 1, acked_after_loss  # the call in flight at the loss
    assert not path.exists()  # no new file


def acked_after(line: str, moment: float) -> bool:
    """Whether `line` (`added ID T`) reports a call that returned after `moment`."""
    return line.startswith("added ") and float(line.split()[2]) > moment


WINDOWS = {
    "nothing committed": ("flush_ms=600000&flush_changes=100000", 300),
    # flushes every 100 ms, each reserving the next block ahead once half a block is used
    "flushes under way": ("flush_ms=100&flush_changes=100000", 5000),
}


@pytest.mark.parametrize("window", WINDOWS.values(), ids=WINDOWS.keys())
def test_an_id_acknowledged_before_a_buffered_crash_is_never_handed_out_again(
    tmp_path: Path, window: tuple[str, int]
) -> None:
    settings, adds = window
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}?{settings}"
    assert add_from_child(url) == "1"
    writer = Child("fast", url)
    writer.wait_for_acks(adds, "the writer did not add")
    assert writer.end(signal.SIGKILL) == -signal.SIGKILL
    acked = set(writer.acked())
    lost = acked - stored_ids(path)
    assert lost, "the crash lost nothing: the window was not hit"
    later = Child("some", url, "300")
    assert finish(later) == 0, later.stderr()
    reused = acked & set(later.acked())
    print(f"buffered crash: acknowledged {len(acked)}, lost {len(lost)}, ids reused {len(reused)}")
    assert len(later.acked()) == 300
    assert reused == set()


def forget_the_name(path: Path) -> Path:
    """A file whose name psyq has no record of (as an older psyq left it), hard-linked."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM file")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return hard_link(path)


def rename_the_recorded(path: Path) -> Path:
    """A hard-linked file whose recorded name was renamed away."""
    link = hard_link(path)
    path.rename(path.with_name("renamed.db"))
    return link


UNNAMED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "no record": (forget_the_name, "psyq recorded none of them"),
    "record renamed": (rename_the_recorded, "no longer names it"),
}


@pytest.mark.parametrize("case", UNNAMED.values(), ids=UNNAMED.keys())
async def test_a_hard_link_psyq_has_no_name_for_is_refused_saying_why(
    tmp_path: Path, case: tuple[Callable[[Path], Path], str]
) -> None:
    make, said = case
    path = tmp_path / "jobs.db"
    async with psyq.Queue("q", connection=f"sqlite:///{path}") as queue:
        await queue.add("n", {})
    link = make(path)
    for url in (f"sqlite:///{link}", f"sqlite:///{link}?share=off"):
        with pytest.raises(PsyqError, match="names \\(hard links\\)") as raised:
            async with psyq.Queue("q", connection=url) as queue:
                await queue.count()
        assert str(link) in str(raised.value) and said in str(raised.value)
        if said == "no longer names it":
            assert str(path) in str(raised.value)  # the name recorded
    assert not Path(f"{link}-wal").exists()  # nothing opened by the second name


def test_a_file_moved_after_a_crash_is_refused_until_it_is_back_with_its_journal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    owner = Child("load", f"sqlite:///{path}")
    owner.wait_for_acks(200, "the owner did not add")
    assert owner.end(signal.SIGKILL) == -signal.SIGKILL  # its last commits are in jobs.db-wal
    moved = path.with_name("moved.db")
    path.rename(moved)
    answer = add_from_child(f"sqlite:///{moved}")
    print(answer)
    assert answer.startswith("PsyqError: ") and f"{path}-wal" in answer, answer
    assert "Move the file back" in answer
    moved.rename(path)
    again = Child("some", f"sqlite:///{path}", "1")
    assert finish(again) == 0, again.stderr()
    lost = set(owner.acked()) - stored_ids(path)
    print(f"moved after a kill -9 and back: acknowledged {len(owner.acked())}, lost {len(lost)}")
    assert lost == set()
    assert integrity(path) == "ok"
