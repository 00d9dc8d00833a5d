"""Every ```python block of the documentation runs as a saved script: README.md and docs/**/*.md.

Each block is compiled as a module (top-level `await` is a SyntaxError there, as in a file)
and run with `__name__ == "__main__"`, in a fresh working folder (so the embedded default,
./psyq.db, is new) and with no running event loop: a block that awaits says
`asyncio.run(main())`. Each block runs in a namespace of its own, so it stands alone when
copied, except on the pages of `ONE_SCRIPT_PAGES`, whose blocks read top to bottom as one
script (they run in order in one namespace). A block that cannot run here says why on the
line before its fence: `<!-- not run: <reason> -->`; the test still compiles it as a
script, lists those, and fails on a marker without a reason.

The cookbook (docs/cookbook/) runs on every backend: each block once per store, the store's
URL in `PSYQ_URL`, which psyq's objects and the compat layer's use when no connection is
given. `COOKBOOK_XFAIL` names the blocks a known defect still breaks on some stores.
"""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest

from tests.conformance.conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
COOKBOOK = ROOT / "docs" / "cookbook"
PAGES = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if COOKBOOK not in p.parents),
]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!-- not run: *(.*?) *-->\s*$")

# page (relative to the root) -> why its blocks form one script
ONE_SCRIPT_PAGES = {
    "docs/porting.md": "its later blocks use the STORE its first block names",
}

# the stores the cookbook runs on: one of each kind (the conformance suite's ids)
COOKBOOK_BACKENDS = ("memory", "sqlite", "psyq", "redis", "postgres")

# (page stem, block number from 1, backend) -> the known defect that breaks that block
# there, run as a strict xfail (so the mark must go when the fix lands). None today.
COOKBOOK_XFAIL: dict[tuple[str, int, str], str] = {}


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


def run_script(code: str, filename: str, namespace: dict[str, object] | None = None) -> None:
    """Run `code` as the script `filename`: compiled as a module, `__name__ == "__main__"`."""
    compiled = compile(code, filename, "exec", dont_inherit=True)
    if namespace is None:
        namespace = {}
    namespace.update({"__name__": "__main__", "__file__": filename})
    exec(compiled, namespace)  # the block's own code, from our docs


def run_page(page: Path) -> list[str]:
    """Run the page's blocks; return the 'line: reason' of those not run."""
    relative = str(page.relative_to(ROOT))
    shared: dict[str, object] | None = {} if relative in ONE_SCRIPT_PAGES else None
    skipped = []
    for line, code, reason in blocks(page):
        if reason is not None:
            assert reason, f"{page.name}:{line}: a 'not run' marker must say why"
            compile(code, f"{relative}:{line}", "exec", dont_inherit=True)  # still a script
            skipped.append(f"{line}: {reason}")
            continue
        run_script(code, f"{relative}:{line}", shared)
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


@pytest.mark.parametrize("page", [*PAGES, *COOKBOOK.glob("*.md")], ids=lambda p: p.name)
def test_every_python_fence_is_closed(page: Path) -> None:
    """A block whose fence is never closed would be run by nobody."""
    opened = len(re.findall(r"^```python", page.read_text(), re.M))
    assert opened == len(blocks(page)), f"{page}: a ```python block is not closed"


def test_a_block_with_top_level_await_is_refused() -> None:
    """What a saved script does with top-level `await`, the test does too."""
    with pytest.raises(SyntaxError):
        run_script("import asyncio\nawait asyncio.sleep(0)\n", "top-level-await.py")


# ------------------------------------------------------------------------------ the cookbook
COOKBOOK_PAGES = sorted(COOKBOOK.glob("*.md"))


def cookbook_cases() -> list[object]:
    """One case per (cookbook block, backend), marked xfail where `COOKBOOK_XFAIL` says."""
    cases: list[object] = []
    for page in COOKBOOK_PAGES:
        for number, (line, code, reason) in enumerate(blocks(page), start=1):
            assert reason is None, f"{page.name}:{line}: every cookbook block runs"
            for backend in COOKBOOK_BACKENDS:
                defect = COOKBOOK_XFAIL.get((page.stem, number, backend))
                marks = [] if defect is None else [pytest.mark.xfail(reason=defect, strict=True)]
                case_id = f"{page.stem}-{number}-{backend}"
                cases.append(pytest.param(page, line, code, backend, marks=marks, id=case_id))
    return cases


def test_every_xfail_names_a_cookbook_block() -> None:
    known = {(p.stem, n) for p in COOKBOOK_PAGES for n in range(1, len(blocks(p)) + 1)}
    assert {(stem, number) for stem, number, _ in COOKBOOK_XFAIL} <= known
    assert {backend for *_, backend in COOKBOOK_XFAIL} <= set(COOKBOOK_BACKENDS)


def test_the_cookbook_pages_are_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert COOKBOOK_PAGES
    for page in COOKBOOK_PAGES:
        assert f"cookbook/{page.name}" in nav, f"{page.name} is missing from mkdocs.yml's nav"


@pytest.mark.parametrize(("page", "line", "code", "backend"), cookbook_cases())
def test_the_cookbook_example_runs_on_every_backend(
    page: Path,
    line: int,
    code: str,
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = BACKENDS[backend](request)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PSYQ_URL", url)
    try:
        run_script(code, f"{page.relative_to(ROOT)}:{line}")
    finally:
        gc.collect()  # what the script left unclosed is reported here, against this example
