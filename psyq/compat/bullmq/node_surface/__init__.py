"""Node BullMQ 6's public surface and its psyq equivalents: the one table that
tests/compat/test_node_surface.py checks against the npm package's type declarations and
that docs/porting.md's generated section is rendered from.

`MEMBERS[cls][name]` is a public member of Node's class `cls` (`QueueBase` and
`QueueGetters` hold what Queue, Worker, QueueEvents and JobScheduler inherit; a subclass's
own entry overrides its base's). `OPTIONS[type][key]` is a key of Node's options type
(`QueueBaseOptions` holds the keys every constructor's options share). Each names the
`psyq.compat.bullmq` call (`compat`, starting with the member's name there), the psyq core
call it maps onto (`core`) and, in `note`, how it differs; an entry without `compat` is not
in the layer and its `note` says why.

`EVENTS[listener][event]` is an event of Node's listener interface `listener` (the type of
`on(event, listener)`; `IoredisListener` holds the one every class inherits): `compat` is the
call the layer's listener gets (`fn(...)`, Node's arguments), `core` psyq's own event.

The table lives in members.py, options.py and events.py (an entry: equivalent.py); this
module is the one entry point that reads it.
"""

from __future__ import annotations

from psyq.compat.bullmq.node_surface.equivalent import Equivalent
from psyq.compat.bullmq.node_surface.events import EVENT_INHERITS, EVENTS
from psyq.compat.bullmq.node_surface.members import INHERITS, MEMBERS
from psyq.compat.bullmq.node_surface.options import OPTION_BASES, OPTIONS

__all__ = [
    "EVENTS",
    "EVENT_INHERITS",
    "INHERITS",
    "MEMBERS",
    "OPTIONS",
    "OPTION_BASES",
    "Equivalent",
    "entry_for",
    "event_for",
    "option_for",
]


def event_for(cls: str, event: str) -> Equivalent | None:
    """The entry of event `event` of Node's class `cls` (its listener's or inherited)."""
    for listener in EVENT_INHERITS.get(cls, ()):
        found = EVENTS.get(listener, {}).get(event)
        if found is not None:
            return found
    return None


def entry_for(cls: str, member: str) -> Equivalent | None:
    """The entry of Node's `cls.member`, its own or its base class's."""
    for owner in INHERITS.get(cls, (cls,)):
        found = MEMBERS.get(owner, {}).get(member)
        if found is not None:
            return found
    return None


def option_for(kind: str, key: str) -> Equivalent | None:
    """The entry of key `key` of Node's options type `kind`, its own or its base's."""
    for owner in OPTION_BASES.get(kind, (kind,)):
        found = OPTIONS.get(owner, {}).get(key)
        if found is not None:
            return found
    return None
