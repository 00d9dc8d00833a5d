"""An entry of the table of Node BullMQ 6's surface (psyq.compat.bullmq.node_surface):
the layer's call, the core call it maps onto and how it differs, or why the layer has none."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EMITTER", "REDIS_HANDLE", "TELEMETRY", "E", "Equivalent", "R"]


@dataclass(frozen=True)
class Equivalent:
    compat: str
    core: str = ""
    note: str = ""

    @property
    def covered(self) -> bool:
        return bool(self.compat)


def E(compat: str, core: str = "", note: str = "") -> Equivalent:
    return Equivalent(compat, core, note)


def R(reason: str, core: str = "") -> Equivalent:
    """Not in the layer, for `reason` (with the core call that does the job, if any)."""
    return Equivalent("", core, reason)


TELEMETRY = "OpenTelemetry spans: psyq traces through its plugin hooks (docs/plugins.md)"
EMITTER = "EventEmitter"
REDIS_HANDLE = "BullMQ's Redis key map; psyq keeps the same keys on Redis"
