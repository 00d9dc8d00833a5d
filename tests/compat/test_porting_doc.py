"""The Python examples of docs/porting.md run, in order, in one namespace (later blocks use
the `STORE` an earlier one names), from a fresh folder, with no PSYQ_URL set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import psyq.compat.bullmq

DOC = Path(__file__).parents[2] / "docs" / "porting.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)


def test_every_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(BLOCKS) >= 9
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PSYQ_URL", raising=False)
    namespace: dict[str, object] = {"__name__": "porting_examples"}
    for index, block in enumerate(BLOCKS):
        exec(compile(block, f"{DOC.name}[python block {index}]", "exec"), namespace)
    assert (tmp_path / "porting.db").exists()  # they ran on the store the page names


def test_public_names_are_the_documented_ones() -> None:
    text = DOC.read_text()
    listed = set(re.findall(r"`(\w+)`", text.split("## From `bullmq` for Python")[0]))
    assert set(psyq.compat.bullmq.__all__) <= listed
