"""What every group of the contract stands on: the backend's name, its URL and the error a
feature it does not offer raises."""

from __future__ import annotations

from abc import ABC

from psyq.backends.keys import JobKeys
from psyq.errors import UnsupportedError, redact_url

__all__ = ["AdapterRoot"]


class AdapterRoot(JobKeys, ABC):
    """The base of each contract group (and so of `BackendAdapter`); job keys: `JobKeys`,
    psyq/backends/keys.py."""

    #: short name used in messages ("memory", "sqlite", "redis", ...)
    kind: str = "backend"

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def safe_url(self) -> str:
        """The URL as messages and logs show it: password and token masked."""
        return redact_url(self.url)

    def _unsupported(self, feature: str) -> UnsupportedError:
        return UnsupportedError(self.kind, feature)
