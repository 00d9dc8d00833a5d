"""The backend's SQL: the named statements of `sql/*.sql` beside this module, loaded once.

A file holds one statement, or several under `-- name: <step>` lines; its opening comment
lists parameters, effects, events and return codes. Statements are looked up as
`"<file>"` or `"<file>.<step>"` (e.g. `"transitions.take"`). SQL is never built from
strings at run time; the one substitution is the layout's schema: `{schema}.` before a
table or function names it qualified (`"bullmq".add_job`), the schema's name quoted as an
identifier, once per schema (`load_statements(schema)`, cached). A statement that runs on
the application's transaction qualifies every name of the layout it reads so: it runs
there under the application's search_path (transaction.py). On the pool the same texts
run; its connections' search_path is the schema anyway.

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

__all__ = [
    "SCHEMA_MARK",
    "Queries",
    "Row",
    "Statements",
    "load_statements",
    "parse_sql_file",
    "quote_identifier",
]

Row = Mapping[str, Any]


_NAME = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
SCHEMA_MARK = "{schema}."  # in a statement: the layout's schema, quoted (see the module doc)


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
def _files() -> dict[str, str]:
    """Every statement as its file writes it ({schema}. marks included)."""
    statements: dict[str, str] = {}
    folder = resources.files(__package__).joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            statements.update(parse_sql_file(entry.name[:-4], entry.read_text("utf-8")))
    return statements


def quote_identifier(name: str) -> str:
    """`name` as a Postgres identifier in double quotes (an inner quote doubled), as the
    server's quote_ident would quote it, always."""
    if not name or "\x00" in name:
        raise ValueError(f"not a Postgres identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


@cache
def load_statements(schema: str | None = None) -> Queries:
    """The statements with the layout's names qualified by `schema`, or, with None,
    unqualified (resolved by the session's search_path, as the schema's migrations and the
    tests that read a statement's text use them)."""
    mark = "" if schema is None else quote_identifier(schema) + "."
    return Queries({name: sql.replace(SCHEMA_MARK, mark) for name, sql in _files().items()})


class Statements(Protocol):
    """Where the backend's named statements run: its pool (BullmqConnection) or the
    application's transaction (InTransaction)."""

    async def _rows(self, name: str, *args: Any) -> Sequence[Row]: ...

    async def _rows_in_order(
        self, locks: Locks | Obliterating, name: str, *args: Any
    ) -> Sequence[Row]: ...
