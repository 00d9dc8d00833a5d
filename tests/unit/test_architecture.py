"""The shape of the code, checked: layers (which package may import which), no import circles
among psyq's and psyq_migrate's modules, no module past 600 lines.

Imports under `if TYPE_CHECKING:` count like the others: they run nothing, but a reader
follows them all the same, and a type named from above is a dependency on it. Where a lower
module needs an upper object it names a narrow Protocol of its own instead.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType
from typing import Protocol

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"psyq": ROOT / "psyq", "psyq_migrate": ROOT / "migrate" / "psyq_migrate"}
MAX_LINES = 600

# The layers, bottom first: a module imports modules of its own layer or of layers below.
# The floor holds the rules both the stores and the core follow (psyq/rules/) and the
# errors; the tools (command line, dashboard, the bullmq layer, migration) stand on top.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("floor", ("psyq.errors", "psyq.rules")),
    ("stores", ("psyq.backends",)),
    ("core", ("psyq.core", "psyq.plugins", "psyq.sandbox")),
    (
        "tools",
        (
            "psyq",
            "psyq.__main__",
            "psyq.sync",
            "psyq.cli",
            "psyq.compat",
            "psyq.dashboard",
            "psyq_migrate",
        ),
    ),
]


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of psyq and psyq_migrate."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = (package, *path.relative_to(folder).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports (for the checker too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {_owner(alias.name, known) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else _owner(base, known))
    return targets - {"", name}


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*parts, node.module] if node.module else parts)


def _owner(name: str, known: dict[str, Path]) -> str:
    """The innermost known module that `name` is or lies in ("" when none)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = [stack.pop()]
            while group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert circles(graph) == []


def test_the_checker_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def layer_of(name: str) -> int:
    """The index in LAYERS of the layer module `name` belongs to (the longest match)."""
    matches = [
        (len(package), level)
        for level, (_, packages) in enumerate(LAYERS)
        for package in packages
        if name == package or (package != "psyq" and name.startswith(package + "."))
    ]
    assert matches, f"{name} is in no layer: add its package to LAYERS"
    return max(matches)[1]


def layer_breaches(graph: dict[str, set[str]]) -> list[str]:
    """`a -> b` for each import of a module from a layer above a's."""
    return sorted(
        f"{name} -> {other}"
        for name, others in graph.items()
        for other in others
        if layer_of(other) > layer_of(name)
    )


def test_each_module_imports_only_its_layer_and_below() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert layer_breaches(graph) == []


def test_the_checker_sees_an_import_from_above() -> None:
    graph = {"psyq.backends.x": {"psyq.core.y", "psyq.rules.z"}, "psyq.core.y": set()}
    graph["psyq.rules.z"] = set()
    assert layer_breaches(graph) == ["psyq.backends.x -> psyq.core.y"]


def test_no_module_past_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in modules().values()
    }
    over = {path: lines for path, lines in long.items() if lines > MAX_LINES}
    assert over == {}


def store_reaches(graph: dict[str, set[str]], tool: str) -> list[str]:
    """Imports from `tool`'s modules into a store's inner modules: a tool reaches the stores
    through the contract (`psyq.backends.base`), the registry (`psyq.backends`) and what
    each store's package exports, never through the store's own modules."""
    allowed = {"psyq.backends", "psyq.backends.base"}
    packages = {f"psyq.backends.{path.name}" for path in (ROOT / "psyq" / "backends").iterdir()}
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith(tool)
        for target in targets
        if target.startswith("psyq.backends.")
        and target not in allowed | packages
        and not target.startswith("psyq.backends.base.")
    )


def test_the_migrate_tool_reaches_the_stores_through_their_packages() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert store_reaches(graph, "psyq_migrate") == []


def test_the_checker_sees_a_reach_into_a_store() -> None:
    graph = {"psyq_migrate.x": {"psyq.backends.sqlite.export", "psyq.backends.sqlite"}}
    assert store_reaches(graph, "psyq_migrate") == ["psyq_migrate.x -> psyq.backends.sqlite.export"]


class _Bare(Protocol):
    """A Protocol with no member: what `typing` itself puts in every Protocol's namespace."""


_TYPING_OWN = frozenset(vars(_Bare))


def protocol_members(protocol: type) -> set[str]:
    """The members a Protocol class declares itself (methods, properties, annotations)."""
    own = set(vars(protocol)) | set(vars(protocol).get("__annotations__", {}))
    return own - _TYPING_OWN


def private_protocol_members(module: ModuleType) -> list[str]:
    """`Protocol.member` for each member starting with `_` (dunders excepted) of a Protocol
    class defined in `module`."""
    found = []
    for value in vars(module).values():
        if not (isinstance(value, type) and value.__module__ == module.__name__):
            continue
        if not getattr(value, "_is_protocol", False) or value is Protocol:
            continue
        for member in protocol_members(value):
            if member.startswith("_") and not (member.startswith("__") and member.endswith("__")):
                found.append(f"{value.__name__}.{member}")
    return sorted(found)


def test_no_protocol_in_the_core_names_a_private_member() -> None:
    """A part sees what it shares through a Protocol; a private member there would tie the
    part to its owner's insides (docs/design/0011)."""
    core = sorted(name for name in modules() if name.startswith("psyq.core."))
    assert core, "found no psyq.core module"
    found = {name: private_protocol_members(importlib.import_module(name)) for name in core}
    assert {name: members for name, members in found.items() if members} == {}


def test_the_checker_sees_a_private_protocol_member() -> None:
    module = ModuleType("psyq_probe")

    class Peeking(Protocol):
        visible: int
        _hidden: int

        def __call__(self) -> None: ...

        def _peek(self) -> None: ...

    Peeking.__module__ = module.__name__
    module.Peeking = Peeking  # type: ignore[attr-defined]
    assert private_protocol_members(module) == ["Peeking._hidden", "Peeking._peek"]
