"""Node BullMQ's public surface read from its type declarations (the `.d.ts` files of the
npm package): each class's public members, inherited ones included, and each options
type's keys, and the events of each class's listener interface. The files are tsc's
output, regular enough for a small reader: one member a line at the body's first
indentation, signatures that span lines inside brackets."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CLASSES", "LISTENERS", "OPTION_TYPES", "Surface", "read_surface"]

# The classes whose surface psyq.compat.bullmq covers.
CLASSES = ("Queue", "Worker", "Job", "FlowProducer", "QueueEvents", "JobScheduler")
# The options types those classes' calls take (an options type's name as Node spells it).
OPTION_TYPES = (
    "QueueOptions",
    "WorkerOptions",
    "QueueEventsOptions",
    "FlowProducerOptions",
    "RepeatBaseOptions",
    "JobsOptions",
    "RepeatOptions",
    "JobSchedulerRepeatOptions",
    "DeduplicationOptions",
    "BackoffOptions",
    "KeepJobs",
    "ParentOptions",
    "AdvancedOptions",
    "RateLimiterOptions",
    "MetricsOptions",
    "RetryOptions",
    "DependenciesOpts",
    "DependencyOpts",
    "MoveToWaitingChildrenOpts",
    "GetNextJobOptions",
    "ObliterateOpts",
    "FlowJobBase",
    "FlowOpts",
    "NodeOpts",
)

# The interface naming each class's events (`on(event, listener)`), as Node declares it.
LISTENERS = {
    "Queue": "QueueListener",
    "Worker": "WorkerListener",
    "QueueEvents": "QueueEventsListener",
    "FlowProducer": "FlowProducerListener",
}

_CLASS = re.compile(r"^export declare class (\w+)(.*)\{\s*$")
_INTERFACE = re.compile(r"^export interface (\w+)(.*)\{\s*$")
_TYPE = re.compile(r"^export type (\w+)(?:<[^=]*>)? = (.*)$")
_MEMBER = re.compile(
    r"^((?:(?:private|protected|public|static|readonly|get|set|async)\s+)*)(\w+)\??\s*[(<:]"
)
_KEY = re.compile(r"^(?:readonly\s+)?(?:'([^']+)'|\"([^\"]+)\"|([\w-]+))\??\s*:")
_OMIT = re.compile(r"^Omit<(\w+)(?:<.*?>)?,\s*(.*)>$")


@dataclass
class Surface:
    """`members[cls]`: public member name -> the class that declares it; `keys[type]`:
    the options type's keys."""

    members: dict[str, dict[str, str]] = field(default_factory=dict)
    keys: dict[str, set[str]] = field(default_factory=dict)
    # `arity[cls][method]`: how many parameters Node's method declares (-1: a rest one)
    arity: dict[str, dict[str, int]] = field(default_factory=dict)
    # `events[cls]`: the event names of the class's listener interface (LISTENERS)
    events: dict[str, set[str]] = field(default_factory=dict)


def _code(line: str) -> str:
    """The line with brackets inside its string literals left out (so they do not count)."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", lambda m: re.sub(r"[(){}\[\]<>]", "", m[0]), line)


def _uncommented(text: str) -> str:
    """`text` without its block comments (tsc writes no other kind into a .d.ts)."""
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _heritage(rest: str) -> str:
    """What a declaration's `extends` names, after its type parameters `<...>`."""
    depth = 0
    for index, char in enumerate(rest):
        depth += char == "<"
        depth -= char == ">" and rest[index - 1] != "="
        if depth == 0 and rest[index:].lstrip().startswith("extends "):
            heritage = rest[index:].lstrip()[len("extends ") :]
            return re.split(r"\simplements\s", heritage)[0].strip()
    return ""


def _depth(text: str) -> int:
    return sum(text.count(c) for c in "({[") - sum(text.count(c) for c in ")}]")


def _bodies(lines: list[str], start: int) -> tuple[list[str], int]:
    """The top-level statements of the body opened on line `start` (each joined onto one
    line), and the index of its closing line."""
    statements: list[str] = []
    current = ""
    depth = 0
    for index in range(start + 1, len(lines)):
        code = _code(lines[index]).strip()
        if depth == 0 and code.startswith("}") and not current:
            return statements, index
        if not code:
            continue
        current = f"{current} {code}".strip()
        depth += _depth(code)
        if depth <= 0:
            statements.append(current)
            current, depth = "", 0
    return statements, len(lines)


def _read(files: list[Path]) -> tuple[dict[str, tuple[str | None, list[str]]], dict[str, str]]:
    """Classes (base, statements) and types (interfaces as `{...}` bodies with their
    `extends`, aliases as their right-hand side) of the files."""
    classes: dict[str, tuple[str | None, list[str]]] = {}
    types: dict[str, str] = {}
    for path in files:
        lines = _uncommented(path.read_text(encoding="utf-8")).splitlines()
        index = 0
        while index < len(lines):
            line = lines[index]
            if match := _CLASS.match(line):
                body, index = _bodies(lines, index)
                base = re.match(r"^(\w+)", _heritage(match[2]))
                classes[match[1]] = (base[1] if base else None, body)
            elif match := _INTERFACE.match(line):
                body, index = _bodies(lines, index)
                bases = " & ".join(_split(_heritage(match[2]), ","))
                types[match[1]] = " & ".join(filter(None, [bases, "{" + ";".join(body) + "}"]))
            elif match := _TYPE.match(line):
                text = match[2]
                while _depth(_code(text)) > 0 and index + 1 < len(lines):
                    index += 1
                    text += " " + _code(lines[index]).strip()
                types[match[1]] = text.rstrip(";")
            index += 1
    return classes, types


def _split(text: str, separators: str) -> list[str]:
    """`text` split at top-level separators (outside brackets and angle brackets)."""
    parts, depth, current = [], 0, ""
    for index, char in enumerate(text):
        depth += char in "({[<"
        depth -= char in ")}]" or (char == ">" and text[index - 1 : index] != "=")  # not =>
        if depth == 0 and char in separators:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return [part for part in parts if part]


def _keys(types: dict[str, str], expression: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The keys of a type expression: object literals, named types, `&` / `|` of them,
    `Omit<T, 'k'>`; anything else (a primitive, a foreign type) has none."""
    keys: set[str] = set()
    for part in _split(expression.strip(), "&|"):
        part = part.strip().removesuffix(";").strip()
        if part.startswith("{") and part.endswith("}"):
            for statement in _split(part[1:-1], ";"):
                if match := _KEY.match(statement.strip()):
                    keys.add(match[1] or match[2] or match[3])
        elif match := _OMIT.match(part):
            omitted = set(re.findall(r"'([^']*)'", match[2]))
            keys |= _keys(types, match[1], seen) - omitted
        else:
            name = re.match(r"^(\w+)", part)
            if name and name[1] in types and name[1] not in seen:
                keys |= _keys(types, types[name[1]], seen | {name[1]})
    return keys


def _members(
    classes: dict[str, tuple[str | None, list[str]]], name: str
) -> tuple[dict[str, str], dict[str, int]]:
    """The class's public members (name -> declaring class) and its methods' arities."""
    base, body = classes[name]
    members, arity = _members(classes, base) if base in classes else ({}, {})
    for statement in body:
        match = _MEMBER.match(statement)
        if match is None or match[2] == "constructor":
            continue
        modifiers = match[1].split()
        if "private" in modifiers or "protected" in modifiers:
            members.pop(match[2], None)
            continue
        members[match[2]] = name
        if "get" not in modifiers and "set" not in modifiers:
            count = _arity(statement[match.end() - 1 :])
            if count is not None:
                arity[match[2]] = count
    return members, arity


def _arity(rest: str) -> int | None:
    """The parameter count of a method's signature (`<T>(a, b?) ...` -> 2; -1 for a rest
    parameter), None for a property."""
    rest = rest.lstrip()
    if rest.startswith("<"):
        depth = 0
        for index, char in enumerate(rest):
            depth += char == "<"
            depth -= char == ">" and rest[index - 1] != "="
            if depth == 0:
                rest = rest[index + 1 :].lstrip()
                break
    if not rest.startswith("("):
        return None
    depth, inside = 0, ""
    for char in rest:
        depth += char in "({[<"
        depth -= char in ")}]>"
        inside += char
        if depth == 0:
            break
    params = _split(inside[1:-1], ",")
    return -1 if any(p.startswith("...") for p in params) else len(params)


def read_surface(package: Path) -> Surface:
    """The surface of the npm package installed at `package` (its folder)."""
    root = package / "dist" / "esm"
    files = sorted(root.glob("classes/*.d.ts"))
    files += sorted(root.glob("interfaces/*.d.ts")) + sorted(root.glob("types/*.d.ts"))
    classes, types = _read(files)
    surface = Surface()
    for name in CLASSES:
        surface.members[name], surface.arity[name] = _members(classes, name)
    for name in OPTION_TYPES:
        surface.keys[name] = _keys(types, types[name]) if name in types else set()
    for cls, listener in LISTENERS.items():
        surface.events[cls] = _keys(types, types[listener]) if listener in types else set()
    return surface


if __name__ == "__main__":
    import sys

    found = read_surface(Path(sys.argv[1]))
    for cls, members in found.members.items():
        print(cls, len(members), sorted(found.arity[cls].items()))
    for kind, keys in found.keys.items():
        print(kind, sorted(keys))
    for cls, events in found.events.items():
        print(cls, "events", sorted(events))
