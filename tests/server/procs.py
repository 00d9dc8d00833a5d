"""Processors for worker processes started by the tcp tests (`psyq worker` imports them).

`record` appends the job id to `$PSYQ_TEST_LOG_DIR/<pid>.log`, one line per invocation, so
the test can count how many times each job ran across processes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

import psyq

_files: list[TextIO] = []


def _log_file() -> TextIO:
    if not _files:
        folder = Path(os.environ["PSYQ_TEST_LOG_DIR"])
        _files.append((folder / f"{os.getpid()}.log").open("a", buffering=1))
    return _files[0]


async def record(job: psyq.Job) -> None:
    _log_file().write(f"{job.id}\n")
