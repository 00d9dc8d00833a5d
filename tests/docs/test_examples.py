"""Every ```python block of the documentation runs: README.md and docs/**/*.md.

The blocks of one page run in order in one namespace (a page may define a processor once
and use it below), in a fresh working folder (so the embedded default, ./psyq.db, is new),
on one event loop: top-level `await` works, as in `python -m asyncio`. A block that cannot
run here says why on the line before its fence: `<!-- not run: <reason> -->`; the test
lists those, and fails on a marker without a reason.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: *(.*?) *-->\s*$")


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, reason not to run or None) of every python block of `page`."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        found.append((line, match.group(1), None if marker is None else marker.group(1)))
    return found


def run_page(page: Path) -> list[str]:
    """Run the page's blocks; return the 'line: reason' of those not run."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    skipped = []
    loop = asyncio.new_event_loop()
    try:
        for line, code, reason in blocks(page):
            if reason is not None:
                assert reason, f"{page.name}:{line}: a 'not run' marker must say why"
                skipped.append(f"{line}: {reason}")
                continue
            name = f"{page.relative_to(ROOT)}:{line}"
            compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(compiled, namespace)  # the block's own code, from our docs
            if inspect.iscoroutine(result):
                loop.run_until_complete(asyncio.wait_for(result, 30))
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    return skipped


PAGES_WITH_CODE = [page for page in PAGES if blocks(page)]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_of_the_page_runs(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PSYQ_URL", raising=False)
    skipped = run_page(page)
    if skipped:
        print(f"{page.name}: not run: {skipped}")
