"""One owner per database file whatever path names it, a file deleted or replaced while
open noticed, and clear errors for files psyq cannot write (docs/reliability.md, "Hostile
conditions")."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import psyq
from psyq.backends.sqlite.lifecycle import is_open_here
from psyq.errors import PsyqError

PSYQ = str(Path(sys.executable).with_name("psyq"))

# A second process that adds one job through `path`: prints the job's id, or the error.
ADD_FROM_CHILD = """
import asyncio, sys
import psyq
async def main() -> None:
    async with psyq.Queue("q", connection=sys.argv[1]) as queue:
        print((await queue.add("n", {})).id)
try:
    asyncio.run(main())
except psyq.PsyqError as exc:
    print(f"PsyqError: {exc}")
"""


def add_from_child(url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", ADD_FROM_CHILD, url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def symlink(path: Path) -> Path:
    alias = path.with_name("alias.db")
    alias.symlink_to(path)
    return alias


def hard_link(path: Path) -> Path:
    alias = path.with_name("linked.db")
    os.link(path, alias)
    return alias


def dotted(path: Path) -> Path:
    return path.parent / "sub" / ".." / path.name


def through_symlinked_folder(path: Path) -> Path:
    folder = path.parent.with_name(path.parent.name + "-alias")
    folder.symlink_to(path.parent)
    return folder / path.name


ALIASES: dict[str, Callable[[Path], Path]] = {
    "symlink": symlink,
    "hard link": hard_link,
    "dot-dot": dotted,
    "symlinked folder": through_symlinked_folder,
}


@pytest.mark.parametrize("alias", ALIASES.values(), ids=ALIASES.keys())
async def test_every_alias_of_an_owned_file_reaches_its_owner_not_a_second_writer(
    tmp_path: Path, alias: Callable[[Path], Path]
) -> None:
    path = tmp_path / "jobs.db"
    (tmp_path / "sub").mkdir()
    async with psyq.Queue("q", connection=f"sqlite:///{path}") as queue:
        await queue.add("n", {})
        other = alias(path)
        answer = await asyncio.to_thread(add_from_child, f"sqlite:///{other}?share=off")
        assert answer.startswith("PsyqError: ") and "is in use by pid" in answer, answer
        assert str(os.getpid()) in answer
        shared = await asyncio.to_thread(add_from_child, f"sqlite:///{other}")
        assert shared == "2"  # share on (the default): it reached the owner's engine
        await queue.add("n", {})
    async with psyq.Queue("q", connection=f"sqlite:///{path}") as queue:
        assert await queue.count() == 3  # the refused process wrote nothing


async def test_aliases_in_one_process_share_the_open_file(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.touch()
    alias = hard_link(path)
    first = psyq.Queue("q", connection=f"sqlite:///{path}")
    second = psyq.Queue("q", connection=f"sqlite:///{alias}")
    async with first, second:
        ids = [(await first.add("n", {})).id, (await second.add("n", {})).id]
        assert is_open_here(str(alias)) and is_open_here(str(symlink(path)))
    assert ids == ["1", "2"]  # one engine: one id counter
    assert not is_open_here(str(path))


def remove_the_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def replace_the_file(path: Path) -> None:
    other = path.with_name("other.db")
    other.write_bytes(b"")
    os.replace(other, path)


LOSSES: dict[str, tuple[Callable[[Path], None], str]] = {
    "deleted": (remove_the_files, "was deleted"),
    "replaced": (replace_the_file, "was replaced by another file"),
}


@pytest.mark.parametrize("loss", LOSSES.values(), ids=LOSSES.keys())
@pytest.mark.parametrize("durability", ["buffered", "durable"])
async def test_a_file_deleted_or_replaced_while_open_stops_every_change(
    tmp_path: Path, durability: str, loss: tuple[Callable[[Path], None], str]
) -> None:
    lose, said = loss
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}?durability={durability}"
    queue = psyq.Queue("q", connection=url)
    try:
        await queue.add("before", {}, durable=True)
        lose(path)
        durable = asyncio.ensure_future(queue.add("durable", {}, durable=True))
        with pytest.raises(PsyqError, match=said):
            await asyncio.wait_for(durable, 10)
        for call in (queue.add("after", {}), queue.add_bulk([{"name": "b", "data": {}}])):
            with pytest.raises(PsyqError, match=said):
                await call
    finally:
        await queue.close()


@pytest.fixture
def read_only_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="psyq-read-only-"))
    try:
        yield folder
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


# As root, permissions do not stop a write: the command runs where the folder is mounted
# read-only (a mount namespace of its own), as on a read-only volume.
READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'


def run_where_read_only(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    if os.getuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("as root, a read-only folder needs `unshare` (util-linux)")
        argv = ["unshare", "-rm", "sh", "-c", READ_ONLY_MOUNT, str(folder), *argv]
    folder.chmod(0o555)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")


@pytest.mark.parametrize("existing", [False, True], ids=["new file", "existing file"])
def test_a_read_only_folder_is_one_clear_error(read_only_folder: Path, existing: bool) -> None:
    path = read_only_folder / "jobs.db"
    if existing:
        path.write_bytes(b"")
    url = f"sqlite:///{path}"
    added = run_where_read_only(read_only_folder, [sys.executable, "-c", ADD_FROM_CHILD, url])
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith(f"PsyqError: cannot open {path}: "), added.stdout
    assert added.stdout.strip().endswith(
        "(an embedded database needs a file, and a folder for its journal, that this "
        "process can write)"
    )
    inspected = run_where_read_only(read_only_folder, [PSYQ, "inspect", "--connection", url])
    assert inspected.returncode == 2, inspected.stderr
    assert inspected.stderr.count("\n") == 1, inspected.stderr
    said = f"cannot open {path}: " if existing else f"no database at {path}"
    assert said in inspected.stderr, inspected.stderr


# A process whose file may not grow past its size when it closes, as on a full disk: the
# checkpoint fails. Prints the close's error, then whether the file is free again.
CLOSE_ON_A_FULL_DISK = """
import asyncio, os, resource, sys
import psyq
from psyq.backends.sqlite.sharing.owner import Owner
async def main(path: str) -> None:
    queue = psyq.Queue("q", connection=f"sqlite:///{path}")
    db = (await queue._open())._db
    db._conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL takes every commit
    await queue.add_bulk([{"name": "n", "data": {"pad": "x" * 2000}} for _ in range(200)])
    db.flush()
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path), resource.RLIM_INFINITY))
    try:
        await queue.close()
        print("closed")
    except psyq.PsyqError as exc:
        print(f"PsyqError: {exc}")
    Owner(path).release()  # refused while this process still held the file
    print("free")
asyncio.run(main(sys.argv[1]))
"""


def test_a_close_that_cannot_checkpoint_says_so_and_lets_the_file_go(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_ON_A_FULL_DISK, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"PsyqError: closing {path}: disk I/O error (the file keeps its last commit)",
        "free",
    ]
