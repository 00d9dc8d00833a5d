"""Redis Cluster: the rules that keep every key of a queue in one hash slot.

A Lua script may only touch keys of one slot, and psyq's scripts touch all the keys of a
queue (and, for flows, the keys of a parent in another queue). Redis Cluster hashes only the
*hash tag* of a key when it has one: the text between the first `{` and the next `}`. So
the queue key `<prefix>:<queue>` must carry a tag, in the prefix (`{bull}`: every queue in
one slot, as BullMQ's docs advise) or in the queue name (`{orders}`: one slot per queue).
"""

from __future__ import annotations

from collections.abc import Iterable

from redis.crc import key_slot

from psyq.errors import InvalidOptionsError

__all__ = ["check_one_slot", "check_tagged", "hash_tag"]


def hash_tag(key: str) -> str | None:
    """The part of `key` that Redis Cluster hashes, or None when the key has no tag."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:  # no closing brace, or `{}`: the whole key is hashed
        return None
    return key[start + 1 : end]


def check_tagged(prefix: str, queue: str) -> None:
    """Raise when the keys of `queue` would spread over several slots of a cluster."""
    if hash_tag(f"{prefix}:{queue}") is None:
        raise InvalidOptionsError(
            f"queue {queue!r} with prefix {prefix!r} has no hash tag: on Redis Cluster every "
            f"key of a queue must share one slot, so put a tag in the prefix (prefix="
            f"{{{prefix}}} in the URL) or in the queue name (e.g. '{{{queue}}}')",
            option="prefix",
        )


def check_one_slot(queue_keys: Iterable[str], what: str) -> None:
    """Raise when `queue_keys` (queue key prefixes) hash to more than one slot: `what`
    (a flow, a child of another queue's parent) would need a cross-slot script."""
    slots = {key: key_slot(key.encode()) for key in queue_keys}
    if len(set(slots.values())) > 1:
        listed = ", ".join(f"{key!r} (slot {slot})" for key, slot in slots.items())
        raise InvalidOptionsError(
            f"{what} spans queues in different Redis Cluster slots: {listed}; give them one "
            "hash tag (a prefix like '{bull}' puts every queue in one slot)",
            option="prefix",
        )
