"""Each package's module map (its README.md) names every module of the package, and names
only modules and folders that exist: a newcomer reads one screen per package, and the map
cannot drift from the tree. A map covers its folder's modules and those of subfolders with
no map of their own (sqlite's sharing/); a subfolder with its own map appears as a folder
entry (`engine/`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAPPED = (
    "psyq/backends",
    "psyq/backends/engine",
    "psyq/backends/sqlite",
    "psyq/backends/server",
    "psyq/backends/contract",
    "psyq/backends/redis",
    "psyq/backends/postgres",
    "psyq/core",
    "psyq/cli",
)
# a table row's first cell: `module.py`, `sub/module.py` or `folder/`
ENTRY = re.compile(r"^\| `([\w/.]+)` \|", re.M)


def map_entries(package: Path) -> list[str]:
    return ENTRY.findall((package / "README.md").read_text("utf-8"))


def modules_of(package: Path) -> set[str]:
    """The package's modules, as paths relative to it, down to subfolders with a map."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        inner = path.relative_to(package)
        folders = [package.joinpath(*inner.parts[: i + 1]) for i in range(len(inner.parts) - 1)]
        if not any((folder / "README.md").exists() for folder in folders):
            found.add(inner.as_posix())
    return found


@pytest.mark.parametrize("name", MAPPED)
def test_the_map_names_every_module(name: str) -> None:
    package = REPO / name
    missing = modules_of(package) - set(map_entries(package))
    assert not missing, f"{name}/README.md does not name {sorted(missing)}"


@pytest.mark.parametrize("name", MAPPED)
def test_every_entry_of_the_map_exists(name: str) -> None:
    package = REPO / name
    entries = map_entries(package)
    assert entries, f"{name}/README.md has no module table"
    absent = [entry for entry in entries if not (package / entry).exists()]
    assert not absent, f"{name}/README.md names what is not there: {absent}"
    assert len(entries) == len(set(entries)), f"{name}/README.md names a module twice"


def test_every_subpackage_with_modules_has_a_map_or_is_covered() -> None:
    """A new backend package gets its map: every package under psyq/backends is mapped."""
    packages = {
        path.parent.relative_to(REPO).as_posix()
        for path in (REPO / "psyq" / "backends").glob("*/__init__.py")
    }
    assert packages <= set(MAPPED), f"no module map for {sorted(packages - set(MAPPED))}"
