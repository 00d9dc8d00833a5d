"""Node BullMQ's sandboxed processor form: `Worker(name, "/path/processor.py")`.

A processor given as a path (a `str`, an `os.PathLike` or a `file://` URL) runs in a
`psyq.sandbox.Sandbox` of `concurrency` child processes: the file's `process` function, or
the one a `"/path/processor.py:function"` names, gets each job (a `SandboxJob`). A
`"module:function"` names an importable function instead. What cannot run is refused when
the Worker is made, naming it.
"""

from __future__ import annotations

import ast
import os
from urllib.parse import unquote, urlsplit

from psyq.errors import InvalidOptionsError, PsyqError
from psyq.sandbox import Sandbox

__all__ = ["DEFAULT_FUNCTION", "sandbox_for"]

DEFAULT_FUNCTION = "process"  # what a processor file defines, as `bullmq`'s examples name it


def sandbox_for(processor: str | os.PathLike[str], processes: int) -> Sandbox:
    """The Sandbox that runs `processor` (a file's path, or "module:function")."""
    text = os.fspath(processor)
    if text.startswith("file://"):
        text = unquote(urlsplit(text).path)
    target = _file_target(text)
    try:
        return Sandbox(target or text, processes)
    except PsyqError as exc:
        raise InvalidOptionsError(
            f"Worker processor {text!r}: {exc}; give a function, the path of a processor "
            f"file (its {DEFAULT_FUNCTION}(job) runs in a sandbox) or 'module:function'",
            option="processor",
        ) from None


def _file_target(text: str) -> str | None:
    """`<absolute path>:<function>` for a processor file (checked), else None."""
    path, sep, function = text.rpartition(":")
    if not (sep and path.endswith(".py")):
        path, function = text, DEFAULT_FUNCTION
    if not path.endswith(".py"):
        return None
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise InvalidOptionsError(
            f"Worker processor file {path} does not exist", option="processor"
        )
    if function not in _top_level_names(path):
        raise InvalidOptionsError(
            f"Worker processor file {path} defines no {function!r} (the function it runs for "
            f"each job; name another as '{path}:<function>')",
            option="processor",
        )
    return f"{path}:{function}"


def _top_level_names(path: str) -> set[str]:
    """The names a Python file binds at its top level, read without running it."""
    with open(path, encoding="utf-8") as file:
        try:
            tree = ast.parse(file.read(), path)
        except SyntaxError as exc:
            raise InvalidOptionsError(
                f"Worker processor file {path} is not valid Python: {exc}", option="processor"
            ) from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names
