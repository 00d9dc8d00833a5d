"""The pipeline's error: bad input or a refused migration (exit 2 on the command line)."""

from __future__ import annotations

from psyq.errors import PsyqError

__all__ = ["MigrateError"]


class MigrateError(PsyqError):
    """A migration, export, enqueue or report that cannot start or must stop; names the value."""
