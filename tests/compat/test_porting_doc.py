"""Every Python example of docs/porting.md runs, on memory:// (through PSYQ_URL, which is
what a `bullmq` program without a connection uses)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import psyq.compat.bullmq

DOC = Path(__file__).parents[2] / "docs" / "porting.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_doc_has_examples() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PSYQ_URL", "memory://")
    code = compile(BLOCKS[index], f"{DOC.name}[python block {index}]", "exec")
    exec(code, {"__name__": f"porting_example_{index}"})


def test_public_names_are_the_documented_ones() -> None:
    text = DOC.read_text()
    listed = set(re.findall(r"`(\w+)`", text.split("## From `bullmq` for Python")[0]))
    assert set(psyq.compat.bullmq.__all__) <= listed
