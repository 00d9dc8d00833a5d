"""Errors of the pipeline: bad input or a refused migration (exit 2 on the command line)."""

from __future__ import annotations

from psyq.errors import PsyqError

__all__ = ["MigrateError", "VerifyMismatch"]


class MigrateError(PsyqError):
    """A migration, export, enqueue or report that cannot start or must stop; names the value."""


class VerifyMismatch(MigrateError):
    """`--verify` found a difference between source and destination (exit 1)."""
