"""A queue's event policy: when its store writes the events a `QueueEvents` reads.

`always` (the default, what Node BullMQ's readers expect): every event is written.
`when-read`: a store may leave a queue's events unwritten while no psyq `QueueEvents`
reads it; a reader sees every event from its start on (Postgres: docs/backends.md)."""

from __future__ import annotations

from psyq.errors import InvalidOptionsError

__all__ = ["ALWAYS", "EVENT_POLICIES", "WHEN_READ", "check_event_policy"]

ALWAYS = "always"
WHEN_READ = "when-read"
EVENT_POLICIES = (ALWAYS, WHEN_READ)


def check_event_policy(value: object) -> str:
    """`value` when it is a known policy; else InvalidOptionsError naming it."""
    if value not in EVENT_POLICIES:
        raise InvalidOptionsError(
            f"events must be 'always' or 'when-read', got {value!r}", option="events"
        )
    assert isinstance(value, str)
    return value
