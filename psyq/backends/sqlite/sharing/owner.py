"""One owner per database file, whatever path names it.

The owner holds an exclusive `flock` on the database file itself, so a symlink, a hard
link or a path through another mount of the same folder reaches the same lock: a second
process is refused, not made a second writer. `<file>.owner` (beside the file the path
resolves to) names the owning process for the refusal's message.

The owner also notices when its path stops naming the file it writes (deleted, or replaced
by another file): `check()` compares the path's device and inode with the open file's, one
`stat` per commit.

The lock's descriptor is closed only after every SQLite connection of the owner: closing
any descriptor of a file drops the process's POSIX locks on it, which SQLite relies on.
"""

from __future__ import annotations

import fcntl
import os
import socket

from psyq.errors import PsyqError

__all__ = ["FileInUse", "Identity", "Owner", "blank_descriptor", "file_identity"]

Identity = tuple[int, int]  # (device, inode)


class FileInUse(PsyqError):
    """Another process owns the file (with ?share=on, the default, this process then
    connects to it instead: sqlite/client.py)."""


def file_identity(path: str) -> Identity | None:
    """The device and inode `path` names now (None: nothing there)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


class Owner:
    """This process's exclusive hold on one database file."""

    def __init__(self, path: str, write: bool = True, create: bool = True) -> None:
        """`write`: the owner writes the file (created when missing, unless not `create`);
        else it only reads it, and keeps writers out meanwhile."""
        self.path = os.path.abspath(path)  # a later chdir changes nothing
        self._fd = _open(path, write, create)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._owner()
            os.close(self._fd)
            raise FileInUse(
                f"{path} is in use by {holder}: one process owns an embedded database. "
                "Leave ?share=on (the default) to reach it through its owner from this host, "
                f"or run `psyq server --data {path}` and connect with psyq://host:6789"
            ) from None
        opened = os.fstat(self._fd)
        self.identity: Identity = (opened.st_dev, opened.st_ino)
        self._note(f"pid {os.getpid()} on {socket.gethostname()}")

    def check(self) -> PsyqError | None:
        """None while the path still names the file this process owns, else the error that
        says it does not (its commits would reach a file no one will open again)."""
        now = file_identity(self.path)
        if now == self.identity:
            return None
        what = "deleted" if now is None else "replaced by another file"
        return PsyqError(
            f"{self.path} was {what} while psyq had it open: changes are no longer written "
            "or acknowledged; restore the file or restart the process to open a new one"
        )

    def watch(self, path: str) -> None:
        """Check `path` from now on (the name the file is opened by: sqlite/names.py)."""
        self.path = path

    def let_go_in_child(self) -> None:
        """In a process forked from the owner: drop the inherited descriptor without
        unlocking (the lock is the parent's), so the lock ends with the parent's; the
        number stays taken (by /dev/null), so nothing closes another file by it later."""
        blank_descriptor(self._fd)

    def release(self) -> None:
        """Give the file up (call after closing every SQLite connection to it)."""
        self._note("")
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)

    def _note_path(self) -> str:
        return os.path.realpath(self.path) + ".owner"

    def _note(self, text: str) -> None:
        """Best effort: the note only names the owner in a refusal's message."""
        try:
            with open(self._note_path(), "w") as note:
                note.write(text)
        except OSError:  # a read-only folder: the refusal then says "another process"
            pass

    def _owner(self) -> str:
        """Who holds the file: its note, else (a hard link, whose note is beside another
        name) the process Linux lists as the lock's holder."""
        try:
            with open(self._note_path()) as note:
                named = note.read().strip()
        except OSError:
            named = ""
        holder = named or _lock_holder(os.fstat(self._fd))
        return holder or "another process"


def _lock_holder(opened: os.stat_result) -> str:
    """`pid N` of the process holding a `flock` on the file, from /proc/locks (Linux);
    empty where that is not known."""
    device = f"{os.major(opened.st_dev):02x}:{os.minor(opened.st_dev):02x}:{opened.st_ino}"
    try:
        with open("/proc/locks") as locks:
            for line in locks:
                fields = line.split()
                if fields[1:2] == ["FLOCK"] and device in fields:
                    return f"pid {fields[4]}"
    except OSError:
        pass
    return ""


def blank_descriptor(fd: int) -> None:
    """Point descriptor `fd` at /dev/null: what it referred to is let go of, and the
    number is not free for another file that a later close of `fd` would close."""
    if fd < 0:  # a socket closed already
        return
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


def _open(path: str, write: bool, create: bool) -> int:
    """A descriptor of the database file (created when missing if `create`), or a clear
    error."""
    flags = (os.O_RDWR | (os.O_CREAT if create else 0)) if write else os.O_RDONLY
    try:
        return os.open(path, flags | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise PsyqError(
            f"cannot open {path}: {exc.strerror} (an embedded database needs a file, and a "
            "folder for its journal, that this process can write)"
        ) from None
