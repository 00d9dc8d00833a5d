"""Every repository path the docs name exists, and so does every name they point at inside a
file: `psyq/core/job.py:failure_outcome`, `tests/x.py::test_y`, `psyq.sandbox:Sandbox`. A
reader follows these to the code; a renamed file or function must take the docs with it.

Read: docs/ (recursively, less docs/log: the bench log's dated records keep their day's
paths), README.md, CONTRIBUTING.md, bench/README.md and the packages' module maps. Paths
are found anywhere in the text, not only in code spans: `psyq/...`, `tests/...`, `bench/...`
and the other top folders from the repository's root; `core/...`, `backends/...` and the
other package folders from `psyq/`. A path with a wildcard or a placeholder (`bench/*.py`,
`<name>`) names no one file and is left alone."""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("psyq", "tests", "bench", "docs", "migrate", "scripts", "examples", ".ci")
PACKAGE_FOLDERS = ("core", "backends", "cli", "rules", "plugins", "dashboard", "compat")
NOT_READ = ("docs/log", "bench/log")  # dated records keep the paths of their day

# a path: a root folder, then path characters; what follows a `:` is a name in the file
PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(re.escape(root) for root in ROOTS + PACKAGE_FOLDERS) + r")"
    r"/[\w./*<>{}-]*)(?:(::?)([\w.]+))?"
)
# module:name, for psyq's own modules (a user's `myapp.tasks:send` is an example, not ours)
MODULE_NAME = re.compile(r"(?<![\w./])((?:psyq|psyq_migrate)(?:\.\w+)*):([A-Za-z_]\w*)")


def read_docs() -> list[Path]:
    docs = [p for p in (REPO / "docs").rglob("*.md") if not _under(p, NOT_READ)]
    maps = [p for p in (REPO / "psyq").rglob("README.md")]
    tops = [REPO / name for name in ("README.md", "CONTRIBUTING.md", "bench/README.md")]
    return sorted([*docs, *maps, *(p for p in tops if p.exists())])


def _under(path: Path, folders: tuple[str, ...]) -> bool:
    relative = path.relative_to(REPO).as_posix()
    return any(relative.startswith(folder + "/") for folder in folders)


def resolve(path: str, doc: Path) -> Path:
    """From the root for a top folder; else from `psyq/`, or from the doc's own folder (a
    page's picture: `dashboard/overview.png` beside docs/dashboard.md)."""
    first = path.split("/", 1)[0]
    if first in ROOTS:
        return REPO / path
    in_package = REPO / "psyq" / path
    return in_package if in_package.exists() else doc.parent / path


def readable_text(doc: Path) -> str:
    """The doc's text, less a design record's Context: it tells the situation on the day of
    the decision, in that day's paths (0013 names the folders it renamed)."""
    text = doc.read_text("utf-8")
    if _under(doc, ("docs/design",)):
        text = re.sub(r"^## Context\n.*?(?=^## )", "", text, flags=re.M | re.S)
    return text


@cache
def defined_names(file: Path) -> frozenset[str]:
    """Every name a Python file defines: functions, classes and assigned names, at any
    depth (a method, a class attribute, a module constant)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text("utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {
                t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)
            }
    return frozenset(names)


def problems_of(doc: Path) -> list[str]:
    text = readable_text(doc)
    found: list[str] = []
    for match in PATH.finditer(text):
        path, colon, name = match.group(1).rstrip(".,;:)"), match.group(2), match.group(3)
        if re.search(r"[*<>{}]", path) or path.endswith(".") or "//" in path:
            continue
        target = resolve(path, doc)
        if not target.exists():
            found.append(f"{path}: no such file or folder")
        elif name and target.suffix == ".py" and target.is_file():
            missing = [part for part in name.split(".") if part not in defined_names(target)]
            if missing and not (colon == ":" and name[0].isdigit()):
                found.append(f"{path}{colon}{name}: {target.name} defines no {missing[0]}")
    for match in MODULE_NAME.finditer(text):
        module, name = match.groups()
        spec = importlib.util.find_spec(module)
        origin = Path(spec.origin) if spec and spec.origin else None
        if origin is None:
            found.append(f"{module}:{name}: no such module")
        elif name not in defined_names(origin):
            found.append(f"{module}:{name}: {module} defines no {name}")
    return found


@pytest.mark.parametrize("doc", read_docs(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_path_and_name_the_doc_names_exists(doc: Path) -> None:
    problems = problems_of(doc)
    assert not problems, f"{doc.relative_to(REPO)} names what is not there:\n" + "\n".join(problems)
