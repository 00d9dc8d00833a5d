"""Shared test helpers (kept small; suites add their own fixtures)."""

from __future__ import annotations

import uuid

import pytest


def fresh_name(prefix: str = "q") -> str:
    """A queue name nobody else uses: tests never flush a whole store."""
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def queue_name() -> str:
    return fresh_name()
