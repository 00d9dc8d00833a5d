"""The backend's SQL: the named statements of `sql/*.sql` beside this module, loaded once.

A file holds one statement, or several under `-- name: <step>` lines; its opening comment
lists parameters, effects, events and return codes. Statements are looked up as
`"<file>"` or `"<file>.<step>"` (e.g. `"transitions.take"`). SQL is never built from
strings at run time.

`Statements` names where they run — the backend's pool (`connection.BullmqConnection`) or
the application's transaction (`transaction.InTransaction`) — so both modules and the
writers that take either import it from here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any, Protocol

from psyq.backends.postgres.locks import Locks, Obliterating

__all__ = ["Queries", "Row", "Statements", "load_statements", "parse_sql_file"]

Row = Mapping[str, Any]


_NAME = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


def _strip_comments(text: str) -> str:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";").strip()


def parse_sql_file(stem: str, text: str) -> dict[str, str]:
    """{"<stem>" or "<stem>.<step>": statement} of one file."""
    parts = _NAME.split(text)
    if len(parts) == 1:
        return {stem: _strip_comments(text)}
    named = dict(zip(parts[1::2], parts[2::2], strict=True))
    return {f"{stem}.{name}": _strip_comments(body) for name, body in named.items()}


class Queries:
    """Statements by name; a missing name is a bug, reported with the known names."""

    def __init__(self, statements: dict[str, str]) -> None:
        self._statements = statements

    def __getitem__(self, name: str) -> str:
        try:
            return self._statements[name]
        except KeyError:
            raise KeyError(
                f"no SQL statement {name!r}; known: {sorted(self._statements)}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._statements)


@cache
def load_statements() -> Queries:
    statements: dict[str, str] = {}
    folder = resources.files(__package__).joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            statements.update(parse_sql_file(entry.name[:-4], entry.read_text("utf-8")))
    return Queries(statements)


class Statements(Protocol):
    """Where the backend's named statements run: its pool (BullmqConnection) or the
    application's transaction (InTransaction)."""

    async def _rows(self, name: str, *args: Any) -> Sequence[Row]: ...

    async def _rows_in_order(
        self, locks: Locks | Obliterating, name: str, *args: Any
    ) -> Sequence[Row]: ...
