"""The SQL of the BullMQ-layout backend, loaded once from `sql/*.sql` beside this module
(named `"<file>.<step>"`, as the private layout's statements are: see ../queries.py)."""

from __future__ import annotations

from functools import cache
from importlib import resources

from psyq.backends.postgres.queries import Queries, parse_sql_file

__all__ = ["load_statements"]


@cache
def load_statements() -> Queries:
    statements: dict[str, str] = {}
    folder = resources.files(__package__).joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            statements.update(parse_sql_file(entry.name[:-4], entry.read_text("utf-8")))
    return Queries(statements)
