"""The compat layer's tests run on every backend through the conformance suite's fixture."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import backend_url  # noqa: F401 - the backend fixture


@pytest.fixture
def opts(backend_url: str) -> dict[str, str]:  # noqa: F811 - the imported fixture
    """`bullmq` options naming the test's backend."""
    return {"connection": backend_url}
