"""Defaults the pipeline takes from a destination URL."""

from __future__ import annotations

from psyq_migrate import MigrateOptions


def test_pages_into_postgres_are_larger_unless_a_size_is_given() -> None:
    assert MigrateOptions("sqlite:///a.db", "postgresql://h/db").page_size == 4000
    assert MigrateOptions("sqlite:///a.db", "postgres://h/db").page_size == 4000
    assert MigrateOptions("sqlite:///a.db", "redis://h:6379/0").page_size == 1000
    assert MigrateOptions("sqlite:///a.db", "sqlite:///b.db").page_size == 1000
    assert MigrateOptions("sqlite:///a.db", "postgresql://h/db", batch_size=7).page_size == 7
