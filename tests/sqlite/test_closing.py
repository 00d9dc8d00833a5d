"""Closing the file while another thread reads it: the read ends (or fails cleanly) and the
process lives. sqlite3 crashes the interpreter when a connection closes under a statement
running on another thread (a NULL handle once the statement returns): an owner closing its
file while its sharing thread still served a read took its process down (CI, 2026-11-28,
tests/sqlite/test_shared.py, exit -11). Run in a child process: a crash fails the test,
not the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, threading, time
from psyq.backends.sqlite.resident import Reader

reader = Reader(sys.argv[1])
slow = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) "
        "SELECT count(*) FROM c")
got, reading = [], threading.Event()
thread = threading.Thread(target=lambda: (reading.set(), got.append(reader.one(slow, ()))))
thread.start()
reading.wait()
time.sleep(0.1)  # sleep: the statement is under way (it runs for about a second)
reader.close()
thread.join()
print(got)
"""


def test_closing_the_reader_under_a_read_of_another_thread_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[1000000]"
